"""A real MCP server for the tests, written with the `mcp` package's server API.

    python tests/mcp_server.py                      stdio (the default)
    python tests/mcp_server.py --http PORT          streamable HTTP on 127.0.0.1:PORT/mcp

Tools: `add(a, b)`, `read_note(name)` (notes are fixed text), `fail(message)` (always
raises ToolError, so the client gets a result with isError and the message),
`delete_note(name)` (annotated destructiveHint; it only says what it deleted),
`count()` (counts its calls in this process), `idempotency_key()` (echoes the key the
client sent in the request's `_meta`), `crash()` (the process exits mid-call).
"""

from __future__ import annotations

import argparse
import os

from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import ToolAnnotations

IDEMPOTENCY_KEY = "durafact/idempotency-key"
COUNTS = {"count": 0}
NOTES = {"groceries": "milk, eggs, bread", "todo": "write the tests"}

server = MCPServer("durafact-test-notes", log_level="WARNING")


@server.tool(description="Add two numbers.")
def add(a: float, b: float) -> str:
    return str(a + b)


@server.tool(description="Read a note by its name.")
def read_note(name: str) -> str:
    if name not in NOTES:
        raise ToolError(f"no note named {name!r}; notes: {', '.join(sorted(NOTES))}")
    return NOTES[name]


@server.tool(description="Always fails with the given message.")
def fail(message: str = "boom") -> str:
    raise ToolError(message)


@server.tool(
    description="Delete a note (destructive).",
    annotations=ToolAnnotations(destructive_hint=True, read_only_hint=False),
)
def delete_note(name: str) -> str:
    return f"deleted {name}"


@server.tool(description="How many times this server process was called through this tool.")
def count() -> str:
    COUNTS["count"] += 1
    return str(COUNTS["count"])


@server.tool(description="The idempotency key the caller sent in the request's _meta.")
def idempotency_key(ctx: Context) -> str:
    return str((ctx.request_context.meta or {}).get(IDEMPOTENCY_KEY, ""))


@server.tool(description="Ends this server process at once, mid-call.")
def crash() -> str:
    os._exit(1)


def main() -> None:
    args = argparse.ArgumentParser()
    args.add_argument("--http", type=int, metavar="PORT", help="serve streamable HTTP")
    port = args.parse_args().http
    if port is None:
        server.run("stdio")
    else:
        server.run("streamable-http", host="127.0.0.1", port=port)


if __name__ == "__main__":
    main()
