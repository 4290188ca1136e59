"""A real MCP server for the tests, written with the `mcp` package's server API.

    python tests/mcp_server.py                      stdio (the default)
    python tests/mcp_server.py --http PORT          streamable HTTP on 127.0.0.1:PORT/mcp
    python tests/mcp_server.py --record FILE        ... and record held calls and crashes

Tools: `add(a, b)`, `read_note(name)` (notes are fixed text), `fail(message)` (always
raises ToolError, so the client gets a result with isError and the message),
`delete_note(name)` (annotated destructiveHint; it only says what it deleted),
`count()` (counts its calls in this process), `idempotency_key()` (echoes the key the
client sent in the request's `_meta`), `crash()` (the process exits mid-call).

Calls held in flight until a crash ends the process, each appending a line to the
record, which outlives the process: `purge(name)` (destructiveHint),
`archive(name)` (destructiveHint and idempotentHint), and `crash_mid_call(calls)`,
which waits until `calls` calls are held, then ends the process; once the record
holds a crash, held calls return at once and `crash_mid_call` only says so.

`misdescribed(when)` is listed with an input schema that is not valid JSON Schema
(`"type": 12`), as a server written by hand may send.
"""

from __future__ import annotations

import argparse
import asyncio
import os
from pathlib import Path
from typing import Annotated

import anyio
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import ToolAnnotations
from pydantic import Field

IDEMPOTENCY_KEY = "durafact/idempotency-key"
COUNTS = {"count": 0}
NOTES = {"groceries": "milk, eggs, bread", "todo": "write the tests"}
RECORD: Path | None = None  # --record FILE
CRASHED = "crashed"
# Long enough for any crash to come first; a held call that outlives it returns.
HOLD_SECONDS = 60.0

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


@server.tool(
    description="Purge a note for good (destructive, and not idempotent). Held until a crash.",
    annotations=ToolAnnotations(destructive_hint=True, idempotent_hint=False),
)
async def purge(name: str, ctx: Context) -> str:
    return await held("purge", name, ctx)


@server.tool(
    description="Archive a note (destructive, idempotent). Held until a crash.",
    annotations=ToolAnnotations(destructive_hint=True, idempotent_hint=True),
)
async def archive(name: str, ctx: Context) -> str:
    return await held("archive", name, ctx)


@server.tool(description="Ends this process once `calls` calls are held (once per record).")
async def crash_mid_call(calls: int = 1) -> str:
    with anyio.move_on_after(HOLD_SECONDS):
        while not crashed():
            if len(recorded()) >= calls:
                record(CRASHED)  # no await before the exit: no held call can answer first
                os._exit(1)
            await asyncio.sleep(0.02)
        return "crashed before"
    raise ToolError(f"fewer than {calls} calls were held")


@server.tool(description="Listed with an input schema that is not JSON Schema.")
def misdescribed(when: Annotated[int, Field(json_schema_extra={"type": 12})]) -> str:
    return str(when)


async def held(verb: str, name: str, ctx: Context) -> str:
    """Record the call (verb, name, idempotency key), then wait for a crash to end the
    process, unless one already has."""
    before = crashed()
    record(f"{verb} {name} {(ctx.request_context.meta or {}).get(IDEMPOTENCY_KEY, '')}")
    if not before:
        await asyncio.sleep(HOLD_SECONDS)
    return f"{verb}d {name}"


def recorded() -> list[str]:
    """The held calls in the record."""
    return [line for line in record_lines() if line != CRASHED]


def crashed() -> bool:
    return CRASHED in record_lines()


def record_lines() -> list[str]:
    path = record_path()
    return path.read_text().splitlines() if path.exists() else []


def record(line: str) -> None:
    with record_path().open("a") as file:
        file.write(line + "\n")


def record_path() -> Path:
    if RECORD is None:
        raise ToolError("this server was started without --record FILE")
    return RECORD


def main() -> None:
    args = argparse.ArgumentParser()
    args.add_argument("--http", type=int, metavar="PORT", help="serve streamable HTTP")
    args.add_argument("--record", type=Path, metavar="FILE", help="where held calls are recorded")
    options = args.parse_args()
    global RECORD
    RECORD = options.record
    port = options.http
    if port is None:
        server.run("stdio")
    else:
        server.run("streamable-http", host="127.0.0.1", port=port)


if __name__ == "__main__":
    main()
