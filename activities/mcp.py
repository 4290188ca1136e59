"""Tools from Model Context Protocol servers, configured on the worker by name.

    durafact-worker --mcp notes="python notes_server.py" --mcp search=https://mcp.example/mcp
    DURAFACT_MCP='notes=python notes_server.py;search=https://mcp.example/mcp'

`NAME=COMMAND` starts the command (split like a shell would, no shell runs it) as a
subprocess and talks to it over stdio; `NAME=http(s)://...` talks streamable HTTP.
NAME is what workflows use: the tool `read` of the server `notes` is `notes__read`.

An `McpServer` is one such server as a `ToolProvider` (activities/tools.py):

- one session per worker process, opened at the first use and kept, so a server that
  keeps state between calls (most stdio servers do) sees one client; a session that
  broke is dropped and the next call opens a new one (a new process for stdio);
- `specs()` lists the tools once and caches them; a tool annotated `destructiveHint`
  is `destructive` (asks a person first); unannotated tools are not, although the
  protocol's default would say so, or no ordinary server could run unattended;
- `call()` hands the call's idempotency key to the server in the request's `_meta`
  (`durafact/idempotency-key`); a result with `isError` raises `McpToolError` with
  the server's message (the model sees it); a server that cannot be reached, or
  whose connection broke, raises `ToolUnavailable` (Temporal retries the call);
- `aclose()` ends the session and, for stdio, the process (the worker calls it when
  it stops).

A stdio server gets the SDK's small default environment (HOME, PATH, USER, ...), not
the worker's, which holds API keys: `env KEY=VALUE command ...` passes more.
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
import shlex
import shutil
from collections.abc import Iterable, Sequence
from typing import Any
from urllib.parse import urlsplit

from mcp import Client, MCPError, StdioServerParameters
from mcp.types import CONNECTION_CLOSED, CallToolResult, Tool
from pydantic import ValidationError

from activities.tools import ToolUnavailable, UnknownTool
from durafact.tools import MCP_SEPARATOR, TOOL_NAME, ToolSpec

log = logging.getLogger("durafact.mcp")

IDEMPOTENCY_META_KEY = "durafact/idempotency-key"
# Opening a session: a stdio server's process start and handshake, or an HTTP connect.
CONNECT_TIMEOUT = 30.0
# Closing one: stdin closed, then SIGTERM, then SIGKILL (the SDK's steps, about 4 s).
CLOSE_TIMEOUT = 10.0
MAX_TOOL_PAGES = 100
URL = re.compile(r"https?://", re.IGNORECASE)


class McpConfigError(ValueError):
    """A `--mcp`/`DURAFACT_MCP` value that names no usable server (one line)."""


class McpToolError(Exception):
    """The server ran the tool and it failed (`isError`), or the server refused the
    request: the message is the server's, for the model to read."""


class McpServer:
    """One configured MCP server (stdio command or streamable HTTP URL) as a
    `ToolProvider`: `specs()`, `call()`, and `aclose()` when the worker stops."""

    def __init__(
        self,
        name: str,
        *,
        command: Sequence[str] | None = None,
        url: str | None = None,
        connect_timeout: float = CONNECT_TIMEOUT,
    ) -> None:
        if (command is None) == (url is None):
            raise ValueError("an MCP server needs a command or a URL, not both")
        if command is not None and not command:
            raise ValueError("an MCP server's command is empty")
        self.name = name
        self.command = list(command) if command is not None else None
        self.url = url
        self.connect_timeout = connect_timeout
        self._client: Client | None = None
        self._owner: asyncio.Task[None] | None = None
        self._closing: asyncio.Event | None = None
        self._session_lock = asyncio.Lock()
        self._specs_lock = asyncio.Lock()
        self._specs: list[ToolSpec] | None = None

    @property
    def target(self) -> str:
        """What this server is, for messages: the command, or the URL without
        credentials, query or fragment."""
        if self.command is not None:
            return shlex.join(self.command)
        parts = urlsplit(self.url or "")
        return f"{parts.scheme}://{parts.hostname}{f':{parts.port}' if parts.port else ''}" + (
            parts.path
        )

    def __repr__(self) -> str:
        return f"<McpServer {self.name}: {self.target}>"

    async def specs(self) -> list[ToolSpec]:
        """The server's tools under its own names, listed once per process."""
        async with self._specs_lock:
            if self._specs is None:
                client = await self._session()
                tools: list[Tool] = []
                cursor: str | None = None
                try:
                    for _ in range(MAX_TOOL_PAGES):
                        page = await client.list_tools(cursor=cursor)
                        tools += page.tools
                        cursor = page.next_cursor
                        if not cursor:
                            break
                except Exception as exc:
                    raise await self._failed(client, exc, "listing tools") from exc
                self._specs = [spec for spec in map(self._spec, tools) if spec is not None]
            return list(self._specs)

    async def call(self, name: str, arguments: dict[str, Any], idempotency_key: str) -> str:
        """Run the tool `name` and return its text; see the module docstring for errors."""
        if name not in {spec.name for spec in await self.specs()}:
            raise UnknownTool(name)
        client = await self._session()
        try:
            result = await client.call_tool(
                name, arguments, meta={IDEMPOTENCY_META_KEY: idempotency_key}
            )
        except Exception as exc:
            raise await self._failed(client, exc, f"calling {name}") from exc
        text = result_text(result)
        if result.is_error:
            raise McpToolError(text or f"{name} failed and said nothing")
        return text

    async def aclose(self) -> None:
        """End the session (and a stdio server's process); a later call opens a new one."""
        async with self._session_lock:
            await self._drop(None)

    async def __aenter__(self) -> McpServer:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    def _spec(self, tool: Tool) -> ToolSpec | None:
        if not TOOL_NAME.fullmatch(tool.name):
            log.warning(
                "MCP server %s: tool %r skipped: models accept only letters, digits, _ and -",
                self.name,
                tool.name,
            )
            return None
        annotations = tool.annotations
        return ToolSpec(
            name=tool.name,
            description=tool.description or (annotations.title if annotations else None) or "",
            parameters=dict(tool.input_schema) or {"type": "object", "properties": {}},
            destructive=bool(annotations and annotations.destructive_hint),
        )

    # The session. The mcp client's task groups must be entered and left in one task,
    # and each activity runs in a task of its own: a task of the server's own ("the
    # owner") opens the client, hands it out, and closes it when told to.

    async def _session(self) -> Client:
        async with self._session_lock:
            if self._client is not None and self._owner is not None and not self._owner.done():
                return self._client
            await self._drop(None)
            ready: asyncio.Future[Client] = asyncio.get_running_loop().create_future()
            closing = asyncio.Event()
            owner = asyncio.create_task(self._own(ready, closing), name=f"mcp server {self.name}")
            try:
                client = await asyncio.wait_for(asyncio.shield(ready), self.connect_timeout)
            except BaseException as exc:
                owner.cancel()
                await asyncio.wait([owner], timeout=CLOSE_TIMEOUT)
                if isinstance(exc, TimeoutError):
                    raise self._unavailable(
                        f"no MCP handshake within {self.connect_timeout:g} s"
                    ) from None
                if isinstance(exc, Exception):
                    raise self._unavailable(reason(exc)) from exc
                raise
            self._client, self._owner, self._closing = client, owner, closing
            log.info("MCP server %s: connected to %s", self.name, self.target)
            return client

    async def _own(self, ready: asyncio.Future[Client], closing: asyncio.Event) -> None:
        try:
            async with Client(self._transport()) as client:
                ready.set_result(client)
                await closing.wait()
        except Exception as exc:
            if not ready.done():
                ready.set_exception(exc)
            else:
                log.info("MCP server %s: session ended: %s", self.name, reason(exc))

    def _transport(self) -> StdioServerParameters | str:
        if self.command is not None:
            return StdioServerParameters(command=self.command[0], args=self.command[1:])
        assert self.url is not None
        return self.url

    async def _drop(self, client: Client | None) -> None:
        """Close the session (`client`: only if it is still that one). Hold the lock."""
        if client is not None and client is not self._client:
            return  # another call already dropped it
        owner, closing = self._owner, self._closing
        self._client = self._owner = self._closing = None
        if owner is None or closing is None:
            return
        closing.set()
        done, _ = await asyncio.wait([owner], timeout=CLOSE_TIMEOUT)
        if not done:
            owner.cancel()
            await asyncio.wait([owner], timeout=CLOSE_TIMEOUT)

    async def _failed(self, client: Client, exc: Exception, doing: str) -> Exception:
        """What a failed request becomes: the server's refusal -> `McpToolError`; a
        connection that broke -> the session is dropped and `ToolUnavailable`."""
        if isinstance(exc, MCPError) and exc.code != CONNECTION_CLOSED:
            return McpToolError(exc.message)
        if isinstance(exc, ValidationError):
            return McpToolError(f"the server's answer to {doing} is not valid MCP: {exc}")
        async with self._session_lock:
            await self._drop(client)
        return self._unavailable(f"{doing}: {reason(exc)}")

    def _unavailable(self, why: str) -> ToolUnavailable:
        return ToolUnavailable(f"MCP server {self.name} ({self.target}) is unavailable: {why}")


def result_text(result: CallToolResult) -> str:
    """What a model sees of a tool result: its text blocks; other blocks by kind; the
    structured content as JSON when there is no block at all."""
    parts: list[str] = []
    for block in result.content:
        kind = block.type
        if kind == "text":
            parts.append(block.text)
        elif kind == "resource":
            resource = block.resource
            text = getattr(resource, "text", None)
            parts.append(text if text is not None else f"[resource {resource.uri}]")
        elif kind == "resource_link":
            parts.append(f"[resource {block.uri}]")
        else:  # image, audio: a model reading text cannot use the bytes
            parts.append(f"[{kind} {getattr(block, 'mime_type', '')}]".replace(" ]", "]"))
    if not parts and result.structured_content is not None:
        return json.dumps(result.structured_content, ensure_ascii=False)
    return "\n".join(parts)


def reason(exc: BaseException) -> str:
    """One line for an exception, looking inside exception groups (anyio task groups
    wrap a connection's failure in one or two)."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    text = str(exc) or type(exc).__name__
    if isinstance(exc, OSError | TimeoutError) or type(exc).__module__.startswith("httpx"):
        text = f"{type(exc).__name__}: {text}"
    return " ".join(text.split())


# Configuration: --mcp NAME=COMMAND|URL (repeatable) and DURAFACT_MCP.


def parse_server(value: str, origin: str = "--mcp") -> McpServer:
    """One `NAME=COMMAND` or `NAME=http(s)://URL`; a mistake is `McpConfigError`."""
    name, separator, target = value.partition("=")
    name, target = name.strip(), target.strip()
    if not separator or not name or not target:
        raise McpConfigError(f"{origin} {value!r}: expected NAME=COMMAND or NAME=http(s)://URL")
    if not TOOL_NAME.fullmatch(name) or MCP_SEPARATOR in name:
        raise McpConfigError(
            f"{origin} {value!r}: the name {name!r} must be letters, digits, _ and - "
            f"(at most 64, without {MCP_SEPARATOR!r})"
        )
    if URL.match(target):
        parts = urlsplit(target)
        try:
            parts.port  # noqa: B018 - raises on a port that is not a number
        except ValueError as exc:
            raise McpConfigError(f"{origin} {value!r}: {exc}") from None
        if not parts.hostname:
            raise McpConfigError(f"{origin} {value!r}: the URL has no host")
        return McpServer(name, url=target)
    if re.match(r"[a-z][a-z0-9+.-]*://", target, re.IGNORECASE):
        raise McpConfigError(
            f"{origin} {value!r}: only http(s) URLs (streamable HTTP) or a command (stdio)"
        )
    try:
        command = shlex.split(target)
    except ValueError as exc:
        raise McpConfigError(f"{origin} {value!r}: {exc}") from None
    if not command:
        raise McpConfigError(f"{origin} {value!r}: the command is empty")
    if shutil.which(command[0]) is None:
        raise McpConfigError(f"{origin} {value!r}: {command[0]!r} is not an executable")
    return McpServer(name, command=command)


def configured_servers(options: Iterable[str] = (), env: str | None = None) -> dict[str, McpServer]:
    """The servers of `--mcp` values and of DURAFACT_MCP (`NAME=...;NAME=...`), by name.
    A bad value or a name given twice is `McpConfigError`."""
    values = [(value, "--mcp") for value in options]
    values += [(value, "DURAFACT_MCP") for value in (env or "").split(";") if value.strip()]
    servers: dict[str, McpServer] = {}
    for value, origin in values:
        server = parse_server(value, origin)
        if server.name in servers:
            raise McpConfigError(f"{origin} {value!r}: the server {server.name!r} is named twice")
        servers[server.name] = server
    return servers


async def close_servers(servers: Iterable[McpServer]) -> None:
    """Close every server's session (and stdio process), all at once."""
    await asyncio.gather(*(server.aclose() for server in servers), return_exceptions=True)


__all__ = [
    "IDEMPOTENCY_META_KEY",
    "McpConfigError",
    "McpServer",
    "McpToolError",
    "close_servers",
    "configured_servers",
    "parse_server",
    "result_text",
]
