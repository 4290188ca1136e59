"""Every side effect of durafact: model calls and source searches and resolves (and,
later, tools)."""

from activities.llm import ModelActivities, classify_error, retry_after
from activities.sources import SourceActivities, build_source, source_failure

__all__ = [
    "ModelActivities",
    "SourceActivities",
    "build_source",
    "classify_error",
    "retry_after",
    "source_failure",
]
