"""Tools: Python functions the worker runs for a model, and the two tool activities.

    @tool
    async def weather(city: str, days: int = 1) -> Forecast:
        "The forecast for a city."           # the description a model reads
        ...

`@tool` turns a typed function (sync or async; every parameter annotated, or one
pydantic model parameter) into a `Tool`: its `ToolSpec` (name, the docstring's
first paragraph, the JSON schema of the arguments object) and a way to run it with
arguments a model wrote. A parameter named `idempotency_key` is not shown to the
model: it gets the call's key (workflow id + call id, the same on every retry), so
a tool with side effects can do them once. `@tool(destructive=True)` marks a tool
that never runs without a person's approval (the recipe asks; see durafact/_core/tools.py).

Tools come from two places: Python tools, registered by `TOOLS = [...]` in a
recipes module (durafact/_runtime/registry.py), and `ToolProvider`s (MCP servers), named in the
worker's configuration. A `ToolCatalog` holds both; `ToolActivities` serve it as
the activities `list_tools` and `call_tool`.

What a failed call reports:

- the model can act on it -> `ToolResult(ok=False, error_type=...)`: `UnknownTool`,
  `InvalidArguments` (not a JSON object, or which field failed and why), `ToolError`
  (the tool raised: its type and message);
- it may pass by itself -> the tool raises `ToolUnavailable`: a retryable
  `ApplicationError`, so Temporal calls it again (after `retry_after` if given);
- it may or may not have run, and running twice would do harm -> the provider raises
  `ToolSessionLost`: a non-retryable `ApplicationError` of that type, which the recipe
  shows the model as the call's observation (durafact/_activities/mcp.py: a session that broke
  mid-call).
"""

from __future__ import annotations

import asyncio
import inspect
import json
import typing
from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import timedelta
from typing import Any, Protocol, TypeVar, overload, runtime_checkable

import pydantic_core
from jsonschema.validators import Draft202012Validator, validator_for
from pydantic import BaseModel, ConfigDict, ValidationError, create_model
from temporalio import activity
from temporalio.exceptions import ApplicationError

from durafact._activities.heartbeat import heartbeating
from durafact._core.text import shorten
from durafact._core.tools import (
    MCP_SEPARATOR,
    TOOL_NAME,
    TOOL_SESSION_LOST,
    BoundCall,
    SkippedTool,
    ToolCall,
    ToolListing,
    ToolListRequest,
    ToolRequest,
    ToolResult,
    ToolSpec,
    mcp_tool_name,
    parse_arguments,
)

IDEMPOTENCY_KEY = "idempotency_key"
UNKNOWN_TOOL = "UnknownTool"
INVALID_ARGUMENTS = "InvalidArguments"
TOOL_ERROR = "ToolError"
TOOL_UNAVAILABLE = "ToolUnavailable"
Named = TypeVar("Named", ToolSpec, SkippedTool)
SHOWN_CHARS = 60  # how much of a value that does not fit a message quotes


class UnknownTool(Exception):
    """No tool of that name. A provider raises it from `call` for a name it lacks."""


class InvalidArguments(Exception):
    """The arguments are not a JSON object or do not validate; the message says which
    field and why, for the model to correct."""


class ToolUnavailable(Exception):
    """Raise from a tool for a failure that may pass by itself (a service down, a rate
    limit): the call is retried by Temporal instead of reported to the model."""

    def __init__(self, message: str, *, retry_after: timedelta | None = None) -> None:
        super().__init__(message)
        self.retry_after = retry_after


class ToolSessionLost(Exception):
    """Raise from a provider's `call` when the call was sent and its connection broke
    before the answer, and the tool must not run twice: it may or may not have run, so
    it is not retried, and the message says so (for the model and the person)."""


@runtime_checkable
class ToolProvider(Protocol):
    """An external source of tools (an MCP server), configured on the worker by name.

    `specs` lists its tools under its own names; the catalog shows them to models as
    `{provider}__{tool}`; `skipped` (read after `specs`) names the tools it offers that
    no model is shown, and why. `call` runs one and returns the text a model sees; it
    may raise `UnknownTool`, `InvalidArguments`, `ToolUnavailable` or `ToolSessionLost`
    to be reported as such, and anything else is reported as a `ToolError`.
    """

    skipped: list[SkippedTool]

    async def specs(self) -> list[ToolSpec]: ...

    async def call(self, name: str, arguments: dict[str, Any], idempotency_key: str) -> str: ...


class Tool:
    """A Python function a model can call: its `spec`, and `run` for a model's arguments.

    Calling the object calls the function as it was written.
    """

    def __init__(
        self,
        fn: Callable[..., Any],
        *,
        name: str | None = None,
        description: str | None = None,
        destructive: bool = False,
    ) -> None:
        self.fn = fn
        name = name or fn.__name__
        if not TOOL_NAME.fullmatch(name):
            raise ValueError(
                f"tool name {name!r}: use letters, digits, _ and -, at most 64 characters"
            )
        if MCP_SEPARATOR in name:
            raise ValueError(f"tool name {name!r}: {MCP_SEPARATOR!r} is kept for MCP tools")
        self._is_async = inspect.iscoroutinefunction(fn)
        self._takes_key, self._model_param, self.arguments = _arguments_model(fn, name)
        parameters = self.arguments.model_json_schema()
        if self._model_param is None:
            parameters.pop("title", None)  # the generated model's name says nothing
        self.spec = ToolSpec(
            name=name,
            description=_first_paragraph(fn.__doc__) if description is None else description,
            parameters=parameters,
            destructive=destructive,
        )
        self.__doc__ = fn.__doc__
        self.__wrapped__ = fn

    @property
    def name(self) -> str:
        return self.spec.name

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.fn(*args, **kwargs)

    def __repr__(self) -> str:
        return f"<tool {self.name}>"

    def validate(self, arguments: Mapping[str, Any]) -> BaseModel:
        """The arguments as the tool's pydantic model, or `InvalidArguments` saying which
        field failed and why."""
        try:
            return self.arguments.model_validate(dict(arguments))
        except ValidationError as exc:
            raise InvalidArguments(validation_message(exc)) from None

    def bind(self, arguments: Mapping[str, Any]) -> dict[str, Any]:
        """The arguments as this tool receives them, as JSON: validated by its model
        (coerced, defaults filled in), or `InvalidArguments`. What a policy judges, so
        it must validate to itself: `run(bound=True)` will validate it again."""
        bound = _as_json(self.validate(arguments))
        try:
            again = _as_json(self.validate(bound))
        except InvalidArguments:
            again = None
        if again != bound:
            raise InvalidArguments(
                "the validated values do not stay the same as JSON (an infinite or NaN "
                "number, or a validator that changes them again), so what would run "
                "cannot be judged"
            )
        return bound

    async def run(
        self, arguments: Mapping[str, Any], idempotency_key: str = "", *, bound: bool = False
    ) -> str:
        """Validate, call (a sync function in a thread) and return the result as text.

        `bound`: the arguments are what `bind` returned, and were judged as they are; a
        model that validates them into other values (a validator that is not
        idempotent) would run something nobody judged, so that is `InvalidArguments`."""
        validated = self.validate(arguments)
        if bound and _as_json(validated) != dict(arguments):
            raise InvalidArguments(
                "validating the approved arguments again changes them, so what would run "
                "is not what was judged; the tool did not run"
            )
        if self._model_param is not None:
            kwargs: dict[str, Any] = {self._model_param: validated}
        else:
            # The validated values themselves (nested models stay models), not a dump.
            kwargs = {field: getattr(validated, field) for field in type(validated).model_fields}
        if self._takes_key:
            kwargs[IDEMPOTENCY_KEY] = idempotency_key
        if self._is_async:
            result = await self.fn(**kwargs)
        else:
            result = await asyncio.to_thread(self.fn, **kwargs)
            if inspect.isawaitable(result):
                result = await result
        return as_text(result)


@overload
def tool(fn: Callable[..., Any], /) -> Tool: ...


@overload
def tool(
    *, name: str | None = None, description: str | None = None, destructive: bool = False
) -> Callable[[Callable[..., Any]], Tool]: ...


def tool(
    fn: Callable[..., Any] | None = None,
    /,
    *,
    name: str | None = None,
    description: str | None = None,
    destructive: bool = False,
) -> Tool | Callable[[Callable[..., Any]], Tool]:
    """Make a typed function a `Tool`: `@tool`, or `@tool(name=..., destructive=True)`.

    `name` defaults to the function's name, `description` to the first paragraph of
    its docstring. A parameter's description comes from
    `Annotated[str, Field(description=...)]`. Mistakes in the signature (a parameter
    without a type, `*args`) are a `TypeError` at decoration.
    """

    def make(fn: Callable[..., Any]) -> Tool:
        return Tool(fn, name=name, description=description, destructive=destructive)

    return make if fn is None else make(fn)


def as_text(result: Any) -> str:
    """What a model sees of a tool's result: a str as is, anything else as JSON."""
    if isinstance(result, str):
        return result
    if isinstance(result, BaseModel):
        return result.model_dump_json()
    return pydantic_core.to_json(result).decode()


def validation_message(exc: ValidationError, limit: int = 5) -> str:
    """One line per failed field: `days: Input should be a valid integer (got 'two')`."""
    parts = []
    for error in exc.errors()[:limit]:
        where = ".".join(str(part) for part in error["loc"]) or "arguments"
        if error["type"] == "extra_forbidden":
            parts.append(f"{where}: not an argument of this tool")
            continue
        got = (
            ""
            if error["type"] == "missing"
            else f" (got {shorten(repr(error.get('input')), SHOWN_CHARS)})"
        )
        parts.append(f"{where}: {error['msg']}{got}")
    more = len(exc.errors()) - limit
    if more > 0:
        parts.append(f"and {more} more")
    return "; ".join(parts)


def tool_arguments(arguments: dict[str, Any] | str, spec: ToolSpec | None = None) -> dict:
    """The arguments object of a call, or `InvalidArguments`.

    A string is parsed as JSON (`parse_arguments`). Text that is not a JSON object
    goes, as it is, to a tool whose only parameter is a string (`calculator` gets
    `2 + 2`, the way the text protocol's Action Input is often written); blank text
    is no object at all.
    """
    if isinstance(arguments, dict):
        return arguments
    parsed = parse_arguments(arguments)
    if isinstance(parsed, dict) and arguments.strip():
        return parsed
    single = _single_string_parameter(spec)
    if single is not None and arguments.strip():
        return {single: arguments.strip()}
    raise InvalidArguments(
        f"the arguments must be a JSON object, not {shorten(repr(arguments), SHOWN_CHARS)}"
    )


def _retryable(what: str, exc: ToolUnavailable) -> ApplicationError:
    """A transient tool failure as the error Temporal retries, after the tool's own delay."""
    return ApplicationError(
        f"{what} is unavailable: {exc}", type=TOOL_UNAVAILABLE, next_retry_delay=exc.retry_after
    )


class ToolCatalog:
    """The tools a worker can run: Python tools by name, and each provider's tools as
    `{provider}__{tool}` (a bare provider name means all of its tools)."""

    def __init__(
        self,
        tools: Iterable[Tool] = (),
        providers: Mapping[str, ToolProvider] | None = None,
    ) -> None:
        self.tools: dict[str, Tool] = {}
        for one in tools:
            known = self.tools.get(one.name)
            if known is not None and known is not one:
                raise ValueError(f"two tools are named {one.name!r}")
            self.tools[one.name] = one
        self.providers: dict[str, ToolProvider] = dict(providers or {})
        for server, provider in self.providers.items():
            if not isinstance(provider, ToolProvider):
                raise TypeError(
                    f"tool provider {server!r}: {provider!r} has no specs(), call() and skipped"
                )
            if not TOOL_NAME.fullmatch(server) or MCP_SEPARATOR in server:
                raise ValueError(
                    f"tool provider name {server!r}: use letters, digits, _ and - "
                    f"(not {MCP_SEPARATOR!r})"
                )
            if server in self.tools:
                raise ValueError(f"{server!r} names both a Python tool and a tool provider")

    async def specs(self, names: Sequence[str]) -> list[ToolSpec]:
        """The specs of the named tools (see `listing`)."""
        return (await self.listing(names)).specs

    async def listing(self, names: Sequence[str]) -> ToolListing:
        """The specs of the named tools, in order, each once, and the named providers'
        tools that no model is shown. An unknown name is a non-retryable
        `ApplicationError` of type `UnknownTool` naming the known ones."""
        found: dict[str, ToolSpec] = {}
        skipped: dict[str, SkippedTool] = {}
        unknown: list[str] = []
        for name in names:
            if name in self.tools:
                found.setdefault(name, self.tools[name].spec)
                continue
            server, tool_name = self._split(name)
            specs: list[ToolSpec] = []
            passed_over: list[SkippedTool] = []
            if server is not None:
                specs = _named(server, tool_name, await self._provider_specs(server))
                passed_over = _named(server, tool_name, self.providers[server].skipped)
            if not specs and not passed_over:
                unknown.append(name)
            for spec in specs:
                found.setdefault(spec.name, spec)
            for tool in passed_over:
                skipped.setdefault(tool.name, tool)
        if unknown:
            raise ApplicationError(
                f"unknown tool{'s' if len(unknown) > 1 else ''} {', '.join(map(repr, unknown))}: "
                f"this worker has {await self.known()}",
                type=UNKNOWN_TOOL,
                non_retryable=True,
            )
        return ToolListing(specs=list(found.values()), skipped=list(skipped.values()))

    async def known(self) -> str:
        """The tool names this worker knows, for messages."""
        names = sorted(self.tools)
        for server in sorted(self.providers):
            try:
                specs = await self.providers[server].specs()
                names += [mcp_tool_name(server, s.name) for s in specs]
            except Exception:  # the list is for a message: an unreachable server stays named
                names.append(f"{server}{MCP_SEPARATOR}* (not reachable now)")
        return "[" + ", ".join(names) + "]" if names else "no tools"

    async def call(self, request: ToolRequest) -> ToolResult:
        """Run one call. What the model can act on comes back as `ok=False`;
        `ToolUnavailable` is raised as a retryable `ApplicationError`."""
        call = request.call
        try:
            content = await self._call(call, request.idempotency_key, request.bound)
        except UnknownTool:
            return self._failed(
                call,
                UNKNOWN_TOOL,
                f"{call.name!r} is not a valid tool, try one of {await self.known()}",
            )
        except InvalidArguments as exc:
            message = f"invalid arguments for {call.name}: {exc}"
            return self._failed(call, INVALID_ARGUMENTS, message)
        except ToolUnavailable as exc:
            raise _retryable(f"tool {call.name}", exc) from exc
        except ToolSessionLost as exc:
            raise ApplicationError(
                f"tool {call.name}: {exc}", type=TOOL_SESSION_LOST, non_retryable=True
            ) from exc
        except ApplicationError:
            raise  # a tool that chose how Temporal treats its failure
        except Exception as exc:
            return self._failed(call, TOOL_ERROR, f"{type(exc).__name__}: {exc}")
        return ToolResult(call_id=call.id, name=call.name, ok=True, content=content)

    async def bind(self, call: ToolCall) -> BoundCall:
        """The arguments `call`'s tool would receive, as JSON: a Python tool's validated by
        its model, a provider's checked against its input schema (which coerces nothing);
        or why they do not bind."""
        try:
            python_tool = self.tools.get(call.name)
            if python_tool is not None:
                arguments = python_tool.bind(tool_arguments(call.arguments, python_tool.spec))
            else:
                server, tool_name = self._split(call.name)
                spec = None if server is None else await self._provider_spec(server, tool_name)
                if spec is None:
                    raise UnknownTool(call.name)
                arguments = tool_arguments(call.arguments, spec)
                _check_schema(arguments, spec)
        except UnknownTool:
            return BoundCall(
                error_type=UNKNOWN_TOOL,
                error=f"{call.name!r} is not a valid tool, try one of {await self.known()}",
            )
        except InvalidArguments as exc:
            return BoundCall(
                error_type=INVALID_ARGUMENTS, error=f"invalid arguments for {call.name}: {exc}"
            )
        return BoundCall(arguments=arguments)

    async def _call(self, call: ToolCall, idempotency_key: str, bound: bool = False) -> str:
        python_tool = self.tools.get(call.name)
        if python_tool is not None:
            arguments = tool_arguments(call.arguments, python_tool.spec)
            return await python_tool.run(arguments, idempotency_key, bound=bound)
        server, tool_name = self._split(call.name)
        if server is None or tool_name is None:
            raise UnknownTool(call.name)
        spec = None
        if isinstance(call.arguments, str):  # only then is the schema needed
            spec = await self._provider_spec(server, tool_name)
        arguments = tool_arguments(call.arguments, spec)
        return as_text(await self.providers[server].call(tool_name, arguments, idempotency_key))

    async def _provider_spec(self, server: str, tool_name: str | None) -> ToolSpec | None:
        """The spec of `server`'s tool `tool_name`, or None when it has no such tool."""
        specs = await self._provider_specs(server)
        return next((s for s in specs if s.name == tool_name), None)

    def _split(self, name: str) -> tuple[str | None, str | None]:
        """(server, tool) for `server__tool`, (server, None) for a bare server name,
        (None, None) when no provider has that name."""
        if name in self.providers:
            return name, None
        server, separator, tool_name = name.partition(MCP_SEPARATOR)
        if separator and tool_name and server in self.providers:
            return server, tool_name
        return None, None

    async def _provider_specs(self, server: str) -> list[ToolSpec]:
        try:
            return list(await self.providers[server].specs())
        except ToolUnavailable as exc:
            raise _retryable(f"tool provider {server}", exc) from exc

    @staticmethod
    def _failed(call: ToolCall, error_type: str, content: str) -> ToolResult:
        return ToolResult(
            call_id=call.id, name=call.name, ok=False, content=content, error_type=error_type
        )


class ToolActivities:
    """The activities `list_tools` and `call_tool` over one catalog; one per worker."""

    def __init__(self, catalog: ToolCatalog) -> None:
        self.catalog = catalog

    @activity.defn(name="list_tools")
    async def list_tools(self, request: ToolListRequest) -> ToolListing:
        not_servers = [s for s in request.mcp_servers if s not in self.catalog.providers]
        if not_servers:
            servers = ", ".join(sorted(self.catalog.providers)) or "none"
            raise ApplicationError(
                f"unknown MCP server{'s' if len(not_servers) > 1 else ''} "
                f"{', '.join(map(repr, not_servers))}: this worker has {servers} "
                "(configure one on the worker with --mcp NAME=COMMAND or NAME=URL)",
                "mcp_servers",  # the field of the request that is wrong, for the refusal
                type=UNKNOWN_TOOL,
                non_retryable=True,
            )
        return await heartbeating(self.catalog.listing([*request.tools, *request.mcp_servers]))

    @activity.defn(name="bind_tool_call")
    async def bind_tool_call(self, call: ToolCall) -> BoundCall:
        return await heartbeating(self.catalog.bind(call))

    @activity.defn(name="call_tool")
    async def call_tool(self, request: ToolRequest) -> ToolResult:
        return await heartbeating(self.catalog.call(request))


def _arguments_model(fn: Callable[..., Any], name: str) -> tuple[bool, str | None, type[BaseModel]]:
    """(takes the idempotency key, the name of its one pydantic parameter or None, the
    pydantic model of the arguments object)."""
    if not callable(fn):
        raise TypeError(f"@tool needs a function, not {fn!r}")
    try:
        hints = typing.get_type_hints(fn, include_extras=True)
    except Exception as exc:
        raise TypeError(f"tool {name}: its annotations cannot be resolved: {exc}") from None
    fields: dict[str, Any] = {}
    takes_key = False
    for param in inspect.signature(fn).parameters.values():
        if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD, param.POSITIONAL_ONLY):
            raise TypeError(
                f"tool {name}: parameter {param.name!r} must be an ordinary named parameter"
            )
        if param.name == IDEMPOTENCY_KEY:
            takes_key = True
            continue
        if param.name not in hints:
            raise TypeError(f"tool {name}: parameter {param.name!r} has no type annotation")
        default = ... if param.default is param.empty else param.default
        fields[param.name] = (hints[param.name], default)
    if len(fields) == 1:
        ((only, (annotation, _)),) = fields.items()
        if isinstance(annotation, type) and issubclass(annotation, BaseModel):
            return takes_key, only, annotation
    model = create_model(  # type: ignore[call-overload]
        f"{name}_arguments", __config__=ConfigDict(extra="forbid"), **fields
    )
    return takes_key, None, model


def _named(server: str, tool_name: str | None, tools: Iterable[Named]) -> list[Named]:
    """The provider's `tools` (specs or skipped tools) named `tool_name` (None: all of
    them), under their catalog names."""
    return [
        tool.model_copy(update={"name": mcp_tool_name(server, tool.name)})
        for tool in tools
        if tool_name in (None, tool.name)
    ]


def _as_json(validated: BaseModel) -> dict[str, Any]:
    """Validated arguments as they cross the wire to a workflow, under the names the
    model accepts (its aliases): JSON text read back, so a value JSON cannot hold (an
    infinite float becomes null) shows here, not later."""
    return json.loads(validated.model_dump_json(by_alias=True))


def _check_schema(arguments: dict[str, Any], spec: ToolSpec) -> None:
    """`InvalidArguments` naming the first few places where `arguments` break the spec's
    JSON schema (a provider's tool: its server validates again, this is what we judge)."""
    schema = spec.parameters
    validator = validator_for(schema, default=Draft202012Validator)(schema)
    errors = list(validator.iter_errors(arguments))
    if errors:
        shown = [
            f"{'.'.join(map(str, e.absolute_path)) or 'arguments'}: "
            f"{shorten(e.message, SHOWN_CHARS)}"
            for e in errors[:5]
        ]
        raise InvalidArguments("; ".join(shown))


def _first_paragraph(doc: str | None) -> str:
    if not doc:
        return ""
    paragraph = inspect.cleandoc(doc).split("\n\n", 1)[0]
    return " ".join(paragraph.split())


def _single_string_parameter(spec: ToolSpec | None) -> str | None:
    if spec is None:
        return None
    properties = spec.parameters.get("properties") or {}
    if len(properties) != 1:
        return None
    ((field, schema),) = properties.items()
    return field if isinstance(schema, dict) and schema.get("type") == "string" else None


__all__ = [
    "InvalidArguments",
    "Tool",
    "ToolActivities",
    "ToolCatalog",
    "ToolProvider",
    "ToolSessionLost",
    "ToolUnavailable",
    "UnknownTool",
    "as_text",
    "tool",
    "tool_arguments",
]
