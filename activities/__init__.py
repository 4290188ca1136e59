"""Every side effect of durafact: model calls, source searches and resolves, and tools.

A user's own tools are Python functions decorated with `@tool` and listed in a
recipes module's `TOOLS`; the worker runs them through the `call_tool` activity.

The names below are imported from their modules when first used: a process that needs
one module (the command line reads `activities.tools` through the registry) does not
load the model client, the web source and their libraries with the package.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from activities.llm import ModelActivities, classify_error, retry_after
    from activities.sources import SourceActivities, build_source, source_failure
    from activities.tools import Tool, ToolActivities, ToolCatalog, ToolUnavailable, tool

# Where each exported name lives.
HOMES = {
    "ModelActivities": "activities.llm",
    "classify_error": "activities.llm",
    "retry_after": "activities.llm",
    "SourceActivities": "activities.sources",
    "build_source": "activities.sources",
    "source_failure": "activities.sources",
    "Tool": "activities.tools",
    "ToolActivities": "activities.tools",
    "ToolCatalog": "activities.tools",
    "ToolUnavailable": "activities.tools",
    "tool": "activities.tools",
}

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


def __getattr__(name: str) -> object:
    if name not in HOMES:
        raise AttributeError(f"module 'activities' has no attribute {name!r}")
    return getattr(importlib.import_module(HOMES[name]), name)
