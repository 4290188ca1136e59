"""The tool contract shared by workflow code and the tool activities.

A tool is named by a string everywhere a workflow sees it: a Python tool by the
name it was registered with on the worker (`calculator`), an MCP tool as
`{server}__{tool}` (the server named in the worker's configuration). The worker
turns names into `ToolSpec`s (the JSON schema a model is shown) and runs the
calls; workflow input never carries a tool's code, command or URL.

A call that a policy or a person judges is first bound (`bind_tool_call`: the
`ToolCall` in, `BoundCall` out): the worker validates its arguments with the
tool's own model and returns them as the tool would receive them, so what is judged
is what runs (see durafact/_recipes/tool_gate.py).

A call is one `call_tool` activity: `ToolRequest` in, `ToolResult` out. What the
tool says, and every way a call can go wrong that the model can act on (an
unknown tool, arguments that do not validate, the tool raising), comes back as a
`ToolResult` with `ok=False`: the recipe shows it to the model as the next
observation instead of failing the run. So does a call that may or may not have
run and must not be sent again (`TOOL_SESSION_LOST`, a non-retryable activity
failure: see durafact/_activities/tools.py).
"""

from __future__ import annotations

import json
import re
from typing import Any

from pydantic import BaseModel, Field

# What the OpenAI chat API accepts as a function name.
TOOL_NAME = re.compile(r"[A-Za-z0-9_-]{1,64}")
# The separator between an MCP server's name and its tool's name.
MCP_SEPARATOR = "__"
# The type of the `call_tool` failure that says the call may or may not have run.
TOOL_SESSION_LOST = "ToolSessionLost"


class ToolSpec(BaseModel):
    """What a model is told about one tool."""

    name: str = Field(description="Letters, digits, _ and -, at most 64: the OpenAI rule.")
    description: str = ""
    parameters: dict[str, Any] = Field(
        default_factory=lambda: {"type": "object", "properties": {}},
        description="JSON schema of the arguments object.",
    )
    destructive: bool = Field(default=False, description="Never runs without a person's approval.")


class SkippedTool(BaseModel):
    """A tool a provider offers that no model is shown, and why."""

    name: str
    reason: str


class ToolListing(BaseModel):
    """The output of the `list_tools` activity."""

    specs: list[ToolSpec]
    skipped: list[SkippedTool] = Field(
        default_factory=list,
        description="Tools of the named servers that are not offered: a name no model "
        "accepts, or an input schema that is not JSON Schema.",
    )


class ToolCall(BaseModel):
    """One call a model asked for."""

    id: str = Field(description="The model's call id (native protocol) or one the recipe made.")
    name: str
    arguments: dict[str, Any] | str = Field(
        default_factory=dict,
        description="The arguments object; the raw text when it was not a JSON object.",
    )


class ToolRequest(BaseModel):
    """The input of the `call_tool` activity."""

    call: ToolCall
    idempotency_key: str = Field(
        description="Workflow id + call id: the same for every retry of this call, so a tool "
        "with side effects can do them once."
    )
    bound: bool = Field(
        default=False,
        description="The arguments are what `bind_tool_call` returned, and what a policy or "
        "a person judged: the tool runs with exactly these values or not at all.",
    )


class BoundCall(BaseModel):
    """The output of the `bind_tool_call` activity: the arguments a call's tool would
    receive, after its own model parsed, bound and validated them, as JSON; or why they
    do not bind (`error_type` UnknownTool or InvalidArguments, and the message)."""

    arguments: dict[str, Any] | None = None
    error_type: str | None = None
    error: str = ""


class ToolResult(BaseModel):
    """The output of the `call_tool` activity: the full observation."""

    call_id: str
    name: str
    ok: bool
    content: str = Field(description="What the tool returned, or what went wrong.")
    error_type: str | None = Field(
        default=None,
        description="UnknownTool, InvalidArguments, ToolError or ToolSessionLost when not ok.",
    )


class ToolListRequest(BaseModel):
    """The input of the `list_tools` activity: names of Python tools and MCP servers."""

    tools: list[str] = Field(default_factory=list)
    mcp_servers: list[str] = Field(default_factory=list)


def mcp_tool_name(server: str, tool: str) -> str:
    return f"{server}{MCP_SEPARATOR}{tool}"


def parse_arguments(text: str | None, *, unquote: bool = False) -> dict[str, Any] | str:
    """A call's arguments from the text a model wrote: a JSON object as a dict, `{}`
    for no text (None or blank), anything else as the text itself. With `unquote`, a
    JSON string is its content (the text protocol's `Action Input: "2 + 2"`)."""
    if not text or not text.strip():
        return {}
    try:
        value = json.loads(text)
    except (ValueError, RecursionError):  # not JSON, or nested past the parser's depth
        return text
    if isinstance(value, dict) or (unquote and isinstance(value, str)):
        return value
    return text


def checked_tool_names(names: list[str]) -> list[str]:
    """`names` when each is a tool name (`TOOL_NAME`), else a ValueError listing the bad ones."""
    bad = [n for n in names if not TOOL_NAME.fullmatch(n)]
    if bad:
        raise ValueError(f"not tool names: {bad} (letters, digits, _ and -, at most 64)")
    return names
