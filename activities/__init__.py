"""Every side effect of durafact: model calls, source searches and resolves, and tools.

A user's own tools are Python functions decorated with `@tool` and listed in a
recipes module's `TOOLS`; the worker runs them through the `call_tool` activity.
"""

from activities.llm import ModelActivities, classify_error, retry_after
from activities.sources import SourceActivities, build_source, source_failure
from activities.tools import Tool, ToolActivities, ToolCatalog, ToolUnavailable, tool

__all__ = [
    "ModelActivities",
    "SourceActivities",
    "Tool",
    "ToolActivities",
    "ToolCatalog",
    "ToolUnavailable",
    "build_source",
    "classify_error",
    "retry_after",
    "source_failure",
    "tool",
]
