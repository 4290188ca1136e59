"""Tools from Model Context Protocol servers, configured on the worker by name.

    durafact-worker --mcp notes="python examples/notes_mcp.py" --mcp search=https://mcp.example/mcp
    DURAFACT_MCP='notes=python examples/notes_mcp.py;search=https://mcp.example/mcp'

`NAME=COMMAND` starts the command (split like a shell would, no shell runs it) as a
subprocess and talks to it over stdio; `NAME=http(s)://...` talks streamable HTTP.
NAME is what workflows use: the tool `read` of the server `notes` is `notes__read`.

An `McpServer` is one such server as a `ToolProvider` (durafact/_activities/tools.py):

- one session per worker process, opened at the first use and kept, so a server that
  keeps state between calls (most stdio servers do) sees one client; a session that
  broke is dropped and the next call opens a new one (a new process for stdio). The
  session, and a stdio server's one process, is shared by every run's calls: a call
  that crashes the server breaks the others in flight too;
- `specs()` lists the tools once and caches them; a tool annotated `destructiveHint`
  is `destructive` (asks a person first); unannotated tools are not, although the
  protocol's default would say so, or no ordinary server could run unattended. A tool
  whose name no model accepts, or whose input schema is not JSON Schema (checked
  against its meta-schema: its own `$schema`, else 2020-12), is skipped with a
  warning and named in `skipped`. A list the MCP SDK refuses as a whole (a schema
  whose root is not an object schema) fails at once, not retried: `InvalidToolList`;
- `call()` hands the call's idempotency key to the server in the request's `_meta`
  (`durafact/idempotency-key`); a result with `isError` raises `McpToolError` with
  the server's message (the model sees it); a server that cannot be reached, or
  whose connection broke, raises `ToolUnavailable` (Temporal retries the call, with
  the same key), except for a call that was sent and must not run twice (destructive
  and not `idempotentHint`): it may or may not have run, so it raises
  `ToolSessionLost` (not retried; the model is told to check). Such a call is sent
  only after its session answered a request, so a session that broke before it is
  still a `ToolUnavailable`;
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

from jsonschema.exceptions import SchemaError
from jsonschema.validators import Draft202012Validator, validator_for
from mcp import Client, MCPError, StdioServerParameters
from mcp.types import CONNECTION_CLOSED, CallToolResult, Tool
from pydantic import ValidationError
from temporalio.exceptions import ApplicationError

from durafact._activities.tools import ToolSessionLost, ToolUnavailable, UnknownTool
from durafact._core.tools import MCP_SEPARATOR, TOOL_NAME, SkippedTool, ToolSpec

log = logging.getLogger("durafact.mcp")

IDEMPOTENCY_META_KEY = "durafact/idempotency-key"
INVALID_TOOL_LIST = "InvalidToolList"
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
        # The listed tools that may be sent again after a call of theirs may have run.
        self._resendable: set[str] = set()
        self.skipped: list[SkippedTool] = []

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
        """The server's tools under its own names, listed once per process; those no
        model can be shown are skipped with a warning, and kept in `skipped`."""
        async with self._specs_lock:
            if self._specs is None:
                tools = await self._list_tools()
                reasons = {tool.name: skip_reason(tool) for tool in tools}
                self.skipped = [SkippedTool(name=n, reason=r) for n, r in reasons.items() if r]
                for bad in self.skipped:
                    log.warning(
                        "MCP server %s: tool %r skipped: %s", self.name, bad.name, bad.reason
                    )
                usable = [tool for tool in tools if reasons[tool.name] is None]
                self._specs = [tool_spec(tool) for tool in usable]
                self._resendable = {tool.name for tool in usable if resendable(tool)}
            return list(self._specs)

    async def call(self, name: str, arguments: dict[str, Any], idempotency_key: str) -> str:
        """Run the tool `name` and return its text; see the module docstring for errors."""
        if name not in {spec.name for spec in await self.specs()}:
            raise UnknownTool(name)
        client = await self._session()
        if name not in self._resendable:
            await self._check(client)
        try:
            result = await client.call_tool(
                name, arguments, meta={IDEMPOTENCY_META_KEY: idempotency_key}
            )
        except Exception as exc:
            failure = await self._failed(client, exc, f"calling {name}")
            if isinstance(failure, ToolUnavailable) and name not in self._resendable:
                failure = self._lost(name, exc)
            raise failure from exc
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

    async def _list_tools(self) -> list[Tool]:
        """Every page of the server's tool list."""
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
        except ValidationError as exc:
            raise self._invalid_list(exc) from None
        except Exception as exc:
            raise await self._failed(client, exc, "listing tools") from exc
        return tools

    async def _check(self, client: Client) -> None:
        """Check the session before a call that must not run twice: a session that broke
        before the call is sent (a server down or restarted) then fails here, as a
        transient error, rather than the call failing as one that may have run. The
        request is the first page of the tool list, past the client's cache: `ping` is
        gone from the protocol since 2026-07-28."""
        try:
            await client.list_tools(cache_mode="bypass")
        except Exception as exc:
            raise await self._failed(client, exc, "checking the session") from exc

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

    def _invalid_list(self, exc: ValidationError) -> ApplicationError:
        """A tool list the SDK refuses as a whole: no tool of it can be skipped alone (the
        SDK hands over no part of it), and asking again gets the same answer."""
        first = exc.errors()[0]
        where = ".".join(map(str, first["loc"]))
        return ApplicationError(
            f"MCP server {self.name}: its tool list is not valid MCP, so none of its tools "
            f"can be offered: {where}: {first['msg']} ({exc.error_count()} problems in all)",
            type=INVALID_TOOL_LIST,
            non_retryable=True,
        )

    def _unavailable(self, why: str) -> ToolUnavailable:
        return ToolUnavailable(f"MCP server {self.name} ({self.target}) is unavailable: {why}")

    def _lost(self, name: str, exc: Exception) -> ToolSessionLost:
        return ToolSessionLost(
            # No target: the model reads this, and a command may carry `env KEY=VALUE`.
            f"the connection to MCP server {self.name} broke during the call ({reason(exc)}), "
            f"perhaps ended by another call: {name} may or may not have run. It is "
            "destructive and not idempotent, so it is not sent again; check whether it ran "
            "before calling it again."
        )


def tool_spec(tool: Tool) -> ToolSpec:
    annotations = tool.annotations
    return ToolSpec(
        name=tool.name,
        description=tool.description or (annotations.title if annotations else None) or "",
        parameters=dict(tool.input_schema) or {"type": "object", "properties": {}},
        destructive=destructive(tool),
    )


def destructive(tool: Tool) -> bool:
    """Annotated `destructiveHint` (not the protocol's default: see the module docstring)."""
    return bool(tool.annotations and tool.annotations.destructive_hint)


def resendable(tool: Tool) -> bool:
    """Whether a call of `tool` that may have run can be sent again: it is not
    destructive, or the server declared that running it twice does no more
    (`idempotentHint`)."""
    return not destructive(tool) or bool(tool.annotations and tool.annotations.idempotent_hint)


def skip_reason(tool: Tool) -> str | None:
    """Why no model can be shown `tool`, or None."""
    if not TOOL_NAME.fullmatch(tool.name):
        return "models accept only letters, digits, _ and - (at most 64) in a name"
    try:
        validator_for(tool.input_schema, default=Draft202012Validator).check_schema(
            tool.input_schema
        )
    except SchemaError as exc:
        where = ".".join(map(str, exc.path)) or "the root"
        return f"its input schema is not JSON Schema: {where}: {exc.message}"
    return None


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
