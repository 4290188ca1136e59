"""Every side effect of durafact: model calls, source searches and resolves, and tools.

A user's own tools are Python functions decorated with `@tool` and listed in a
recipes module's `TOOLS`; the worker runs them through the `call_tool` activity.

The names below are imported from their modules when first used: a process that needs
one module (the command line reads `durafact._activities.tools` through the registry) does not
load the model client, the web source and their libraries with the package.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from durafact._activities.llm import ModelActivities, classify_error, retry_after
    from durafact._activities.sources import SourceActivities, build_source, source_failure
    from durafact._activities.tools import Tool, ToolActivities, ToolCatalog, ToolUnavailable, tool

# Where each exported name lives.
HOMES = {
    "ModelActivities": "durafact._activities.llm",
    "classify_error": "durafact._activities.llm",
    "retry_after": "durafact._activities.llm",
    "SourceActivities": "durafact._activities.sources",
    "build_source": "durafact._activities.sources",
    "source_failure": "durafact._activities.sources",
    "Tool": "durafact._activities.tools",
    "ToolActivities": "durafact._activities.tools",
    "ToolCatalog": "durafact._activities.tools",
    "ToolUnavailable": "durafact._activities.tools",
    "tool": "durafact._activities.tools",
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
