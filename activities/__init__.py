"""Every side effect of durafact: model calls (and, later, sources and tools)."""

from activities.llm import ModelActivities, classify_error, retry_after

__all__ = ["ModelActivities", "classify_error", "retry_after"]
