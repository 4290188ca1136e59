"""The LLM activity: one chat completion through the `openai` client.

The client runs with `max_retries=0`: Temporal owns retries, so every attempt is
visible in the workflow's history and honours the workflow's retry policy. This
module only classifies failures: transient ones are retryable (with the server's
`retry-after` as the next delay), request errors fail at once.

Structured output is asked for by name: the request carries the `type_path` of a
pydantic model and the activity looks it up among the models the worker was
registered with (`OUTPUT_MODELS` of its recipes modules). Nothing named in
workflow input is ever imported; an unregistered name fails the call at once
(`UnknownOutputType`, not retryable) with how to register the model.

A tool loop or a chat sends the same constant-size request on every turn: its
`conversation` names the run's `ChatTurn` artifacts, which the activity reads from
its own workflow (in memory when it runs in the worker process that scheduled it,
durafact/_runtime/handoff.py; else the query `context_messages`) and sends after
`messages` as chat messages with their roles, tool calls and tool-call ids. Tools are named; the
worker's tool catalog gives their schemas (`tools=`), and the calls the model asks
for come back in `LLMResponse.tool_calls` with their arguments parsed.

Fallback. A request may name endpoints to move to (`LLMRequest.fallback`): an attempt
scheduled `fallback_after` or more after the call's first attempt goes to the next one.
That is decided inside the one activity's retry schedule, so the call is answered once,
by whichever endpoint answers first; a refusal (4xx) fails it wherever it happens. Each
endpoint is a client holding its own key only. The response names the endpoint.

Prompt caching. Every request carries `prompt_cache_key`, the run id (a UUID: no text
of the run), so an endpoint that routes by it sends a run's calls, which share their
prefix, to the same cache. An endpoint that refuses the parameter (400 or 422) is asked
again at once without it, and never sent it again.
"""

from __future__ import annotations

import asyncio
import contextlib
import email.utils
import functools
import json
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping
from datetime import timedelta
from typing import Any, Protocol, TypeVar
from urllib.parse import quote

import openai
from openai.types import CompletionUsage
from openai.types.chat import ChatCompletion, ChatCompletionMessage
from pydantic import BaseModel, ValidationError
from temporalio import activity
from temporalio.client import Client
from temporalio.contrib.workflow_streams import WorkflowStreamClient
from temporalio.exceptions import ApplicationError
from temporalio.service import RPCError

from durafact._activities.heartbeat import heartbeating
from durafact._core.llm import (
    ArtifactSpan,
    ChatMessage,
    ChatTurn,
    ContextRef,
    ContextText,
    LLMRequest,
    LLMResponse,
    ResolvedContext,
    StreamTo,
    TextChunk,
    Usage,
    strict_json_schema,
    type_path,
)
from durafact._core.prices import Prices
from durafact._core.redaction import redact_urls
from durafact._core.sources import DEFAULT_ENDPOINT
from durafact._core.tools import ToolCall, ToolSpec, parse_arguments

# Status codes that no retry can fix, and the error type each one is reported as.
NON_RETRYABLE_STATUS = {
    400: "BadRequest",
    401: "AuthenticationFailed",
    403: "PermissionDenied",
    404: "ModelNotFound",
    422: "UnprocessableRequest",
}
RETRYABLE_STATUS = {408: "RequestTimeout", 409: "Conflict", 429: "RateLimited"}
MAX_RETRY_AFTER = timedelta(minutes=5)
# How many attempts an empty free-text answer gets before the call fails.
EMPTY_ANSWER_ATTEMPTS = 6


def retry_after(headers: Any) -> timedelta | None:
    """The server's requested delay from `retry-after-ms` or `retry-after` (seconds or a date)."""
    if headers is None:
        return None
    millis = headers.get("retry-after-ms")
    if millis:
        try:
            return min(timedelta(milliseconds=float(millis)), MAX_RETRY_AFTER)
        except ValueError:
            pass
    value = headers.get("retry-after")
    if not value:
        return None
    try:
        seconds = float(value)
    except ValueError:
        try:
            seconds = email.utils.parsedate_to_datetime(value).timestamp() - time.time()
        except (TypeError, ValueError):
            return None  # unreadable: the retry policy's own backoff applies
    return min(timedelta(seconds=max(seconds, 0.0)), MAX_RETRY_AFTER)


def classify_error(exc: Exception, endpoint: str | None = None) -> ApplicationError:
    """Turn an `openai` exception into the ApplicationError Temporal should act on; its
    message names `endpoint` when given (a call that may move between endpoints).

    URLs in its message are redacted (durafact/_core/redaction.py): an endpoint's error may
    echo the URL it was sent, credentials and all. Raise it `from None`: the original
    exception, with the raw message, would travel along as the failure's cause."""
    where = f"model endpoint {endpoint!r}" if endpoint else "model endpoint"
    if isinstance(exc, openai.APIStatusError):
        status = exc.status_code
        detail = redact_urls(f"{where} answered {status}: {exc.message}")
        if status in NON_RETRYABLE_STATUS:
            return ApplicationError(detail, type=NON_RETRYABLE_STATUS[status], non_retryable=True)
        if status in RETRYABLE_STATUS or status >= 500:
            return ApplicationError(
                detail,
                type=RETRYABLE_STATUS.get(status, "ServerError"),
                next_retry_delay=retry_after(exc.response.headers),
            )
        return ApplicationError(detail, type="RequestRejected", non_retryable=True)
    if isinstance(exc, openai.APITimeoutError):
        return ApplicationError(redact_urls(f"{where} timed out: {exc}"), type="ModelTimeout")
    if isinstance(exc, openai.APIConnectionError):
        return ApplicationError(redact_urls(f"{where} unreachable: {exc}"), type="ModelUnreachable")
    raise exc


UNKNOWN_OUTPUT_TYPE = "UnknownOutputType"
NO_TOOLS = "NoToolsOnWorker"
UNKNOWN_TOOL = "UnknownTool"
UNKNOWN_ENDPOINT = "UnknownEndpoint"
CACHE_KEY = "prompt_cache_key"
# What an endpoint answers to a parameter it does not know, when it does not ignore it.
REFUSED = (openai.BadRequestError, openai.UnprocessableEntityError)
T = TypeVar("T")


class ToolSpecLookup(Protocol):
    """What the model activity needs of the worker's tool catalog."""

    async def specs(self, names: list[str]) -> list[ToolSpec]: ...


# What the model activity needs of the worker's handoff store: the context the
# workflow resolved for (run id, activity id) when it scheduled the call, if any.
HandedContext = Callable[[str, str], ResolvedContext | None]


def tool_schema(spec: ToolSpec) -> dict[str, Any]:
    """One tool as a `tools=` function schema."""
    return {
        "type": "function",
        "function": {
            "name": spec.name,
            "description": spec.description,
            "parameters": spec.parameters,
        },
    }


def render_turn(turn: ChatTurn) -> dict[str, Any]:
    """One `ChatTurn` as an OpenAI chat message."""
    message: dict[str, Any] = {"role": turn.role, "content": turn.content}
    if turn.tool_calls:
        # An assistant turn that only calls tools has no text; the API wants null then.
        message["content"] = turn.content or None
        message["tool_calls"] = [
            {
                "id": call.id,
                "type": "function",
                "function": {
                    "name": call.name,
                    # A raw string is what the model sent when it was not a JSON object:
                    # it goes back as it was, so the model sees its own mistake.
                    "arguments": call.arguments
                    if isinstance(call.arguments, str)
                    else json.dumps(call.arguments, ensure_ascii=False),
                },
            }
            for call in turn.tool_calls
        ]
    if turn.tool_call_id is not None:
        message["tool_call_id"] = turn.tool_call_id
    if turn.name is not None and turn.role == "tool":
        message["name"] = turn.name
    return message


def render_messages(messages: list[ChatMessage], context: ResolvedContext) -> list[dict[str, Any]]:
    """The chat messages a request sends: each message with the texts its references
    resolved to (`context`, in message order), then the conversation's turns."""
    rendered: list[dict[str, Any]] = []
    for message, resolved in zip(messages, context.texts, strict=True):
        texts = list(resolved)
        content = texts.pop(0).text if message.content_from else message.content
        cited = [f"[{t.id}] {t.text}" for t in texts]
        parts = ([content] if content else []) + cited
        # Separate: the content and the first text make one message, each later text
        # one more (see ChatMessage.separate).
        whole = len(parts) - len(cited) + 1 if message.separate else len(parts)
        for text in ["\n\n".join(parts[:whole]), *parts[whole:]]:
            rendered.append({"role": message.role, "content": text})
    rendered += [render_turn(turn) for turn in context.turns or ()]
    return rendered


def tool_calls_of(message: Any) -> list[ToolCall]:
    """The function calls in a completion's message (other kinds are not ours to run)."""
    calls = []
    for call in getattr(message, "tool_calls", None) or []:
        function = getattr(call, "function", None)
        if function is None:
            continue
        calls.append(
            ToolCall(id=call.id, name=function.name, arguments=parse_arguments(function.arguments))
        )
    return calls


NOT_A_CHAT_COMPLETION = "NotAChatCompletion"


def not_a_chat_completion(what: str) -> ApplicationError:
    """The endpoint answered, but not with a chat completion (a login page, another API):
    asking again gets the same answer, so the call fails at once."""
    return ApplicationError(
        redact_urls(f"the model endpoint answered with {what}, not a chat completion: is ")
        + "OPENAI_BASE_URL an OpenAI-compatible API (ending in /v1)?",
        type=NOT_A_CHAT_COMPLETION,
        non_retryable=True,
    )


def chat_completion(answer: Any) -> ChatCompletion:
    """`answer` when it has the shape of a chat completion where this module reads it
    (choices, the first choice's message, its text and tool calls, usage), else a
    `NotAChatCompletion` error. The client does not check: a 200 with an HTML body comes
    back as a str, and JSON without `choices` as a completion whose fields are None."""
    if isinstance(answer, str | bytes):
        text = answer.decode("utf-8", "replace") if isinstance(answer, bytes) else answer
        shown = " ".join(text.split())[:80]
        raise not_a_chat_completion(f"text ({shown!r})" if shown else "an empty body")
    if not isinstance(answer, ChatCompletion):
        raise not_a_chat_completion(f"JSON of another kind ({type(answer).__name__})")
    if not isinstance(answer.choices, list):
        raise not_a_chat_completion("JSON without a 'choices' list")
    if answer.choices:
        message = getattr(answer.choices[0], "message", None)
        if not isinstance(message, ChatCompletionMessage):
            raise not_a_chat_completion("a first choice without a message object")
        if message.content is not None and not isinstance(message.content, str):
            raise not_a_chat_completion("a message whose content is not text")
        calls = message.tool_calls
        if calls is not None and not (
            isinstance(calls, list) and all(_well_formed_call(call) for call in calls)
        ):
            raise not_a_chat_completion("tool calls without an id, a name and arguments")
    usage = answer.usage
    if usage is not None and not (
        isinstance(usage, CompletionUsage)
        and all(
            isinstance(n, int | None)
            for n in (usage.prompt_tokens, usage.completion_tokens, usage.total_tokens)
        )
    ):
        raise not_a_chat_completion("a 'usage' that is not token counts")
    return answer


def usage_of(reported: Any) -> Usage:
    """The tokens an endpoint reports (`usage` of a completion or of a stream's last
    chunk), with those of the prompt read from its cache
    (`prompt_tokens_details.cached_tokens`, when it says)."""
    cached = getattr(getattr(reported, "prompt_tokens_details", None), "cached_tokens", None)
    return Usage(
        prompt_tokens=reported.prompt_tokens or 0,
        completion_tokens=reported.completion_tokens or 0,
        total_tokens=reported.total_tokens or 0,
        cached_tokens=cached if isinstance(cached, int) and cached > 0 else 0,
    )


def _well_formed_call(call: Any) -> bool:
    function = getattr(call, "function", None)
    if function is None:
        return True  # not a function call: not ours to run, skipped
    return (
        isinstance(getattr(call, "id", None), str)
        and isinstance(getattr(function, "name", None), str)
        and isinstance(getattr(function, "arguments", None), str | None)
    )


class ModelActivities:
    """Activities that talk to the model; one instance per worker.

    `output_models` are the pydantic models structured calls may ask for: the worker's
    registered ones. A request names its model (`type_path`); the activity looks the
    name up here and never imports what a workflow sends.

    `tools` is the worker's tool catalog (anything with `async specs(names)`), or None
    when the worker has no tools: then a request that names tools fails at once
    (`NoToolsOnWorker`), as does one naming a tool the catalog does not know
    (`UnknownTool`).

    `llm` is the endpoint `default`; `endpoints` are the worker's other model endpoints
    by name, each a client holding its own key, that a request may name
    (`LLMRequest.endpoint`, `LLMRequest.fallback`); a name the worker lacks fails at once
    (`UnknownEndpoint`), before anything is sent. `models` are the chat models of the
    endpoints that name their own (else `default_model`, unless the request names one).

    `handed` takes the context its workflow resolved when the call was scheduled in
    this worker process (`Handoff.take` of durafact/_runtime/handoff.py); without it, or
    on a miss, the activity reads the context with its workflow's queries.

    `prices` is the worker's price table (durafact/_core/prices.py): every response's usage
    gets its cost from it, and without one (or for a model it does not list) the cost
    None, unknown.
    """

    def __init__(
        self,
        llm: openai.AsyncOpenAI,
        temporal: Client,
        default_model: str,
        output_models: Iterable[type[BaseModel]] = (),
        tools: ToolSpecLookup | None = None,
        endpoints: Mapping[str, openai.AsyncOpenAI] | None = None,
        handed: HandedContext | None = None,
        models: Mapping[str, str] | None = None,
        prices: Prices | None = None,
    ) -> None:
        self._llm = llm
        self._models = dict(models or {})
        self._prices = prices
        self._handed = handed
        self._endpoints = {DEFAULT_ENDPOINT: llm, **(endpoints or {})}
        self._temporal = temporal
        self._default_model = default_model
        self._output_models = {type_path(model): model for model in output_models}
        self._tools = tools
        # Rendered `tools=` per requested name list: a tool loop asks for the same
        # tools on every turn, and listing an MCP server's tools is a round trip.
        self._tool_schemas: dict[tuple[str, ...], list[dict[str, Any]]] = {}
        # Endpoints that answered a streaming request with a whole completion.
        self._whole: set[str] = set()
        # Endpoints that refused `prompt_cache_key`.
        self._no_cache_key: set[str] = set()

    def _endpoint(self, name: str | None) -> openai.AsyncOpenAI:
        """The client of the endpoint `name` (None: `default`)."""
        name = (name or DEFAULT_ENDPOINT).lower()
        try:
            return self._endpoints[name]
        except KeyError:
            raise ApplicationError(
                f"no model endpoint {name!r} is configured on this worker; it has "
                f"{', '.join(repr(n) for n in sorted(self._endpoints))} (more with "
                "DURAFACT_ENDPOINT_<NAME>=URL and DURAFACT_ENDPOINT_<NAME>_KEY=KEY)",
                type=UNKNOWN_ENDPOINT,
                non_retryable=True,
            ) from None

    def _endpoint_for(self, request: LLMRequest, info: activity.Info) -> str:
        """The endpoint this attempt goes to: `request.endpoint`, or once the call has
        failed for `fallback_after` since its first attempt was scheduled the next of
        `request.fallback`, and so on (the last is kept). Every name is checked first: a
        wrong fallback name fails the first attempt, not the one an outage leads to."""
        names = [request.endpoint or DEFAULT_ENDPOINT, *request.fallback]
        names = [name.lower() for name in names]
        for name in names:
            self._endpoint(name)
        # Both times are the server's, so the worker's clock does not matter.
        elapsed = info.current_attempt_scheduled_time - info.scheduled_time
        chosen = names[min(int(elapsed / request.fallback_after), len(names) - 1)]
        if chosen != names[0]:
            activity.logger.warning(
                "attempt %d goes to endpoint %r: the call has failed for %s",
                info.attempt,
                chosen,
                elapsed,
            )
        return chosen

    async def _without_refused_key(
        self,
        endpoint: str,
        kwargs: dict[str, Any],
        send: Callable[[], Awaitable[T]],
        named_only: bool = False,
    ) -> T:
        """`send()`; when the endpoint refuses it (400, 422) while `kwargs` hold
        `prompt_cache_key` (with `named_only`, a refusal that names the key: a streaming
        request may be refused for streaming), `send()` again without the key, and when
        that is taken, never send the key to this endpoint again. A request that was bad
        anyway is refused again."""
        try:
            return await send()
        except REFUSED as exc:
            named = CACHE_KEY in f"{exc.message} {exc.body}"
            if CACHE_KEY not in kwargs or (named_only and not named):
                raise
        del kwargs[CACHE_KEY]
        answer = await send()
        self._no_cache_key.add(endpoint)
        activity.logger.info("endpoint %r refuses %s: not sent to it again", endpoint, CACHE_KEY)
        return answer

    def _output_type(self, name: str) -> type[BaseModel]:
        try:
            return self._output_models[name]
        except KeyError:
            raise ApplicationError(
                f"output type {name!r} is not registered with this worker: list the model in "
                "OUTPUT_MODELS of the recipes module that lists the workflow, and load that "
                "module on the worker (--recipes MODULE, DURAFACT_RECIPES, or an entry point "
                "in the group durafact.recipes)",
                type=UNKNOWN_OUTPUT_TYPE,
                non_retryable=True,
            ) from None

    async def _context_texts(self, refs: list[ContextRef]) -> list[ContextText]:
        # Earlier artifacts come from the workflow's own ledger by query, so they are
        # not copied into this activity's input (and into history) on every call.
        info = activity.info()
        handle = self._temporal.get_workflow_handle(info.workflow_id, run_id=info.workflow_run_id)
        return await handle.query("context_texts", refs, result_type=list[ContextText])

    async def _context_messages(self, conversation: ArtifactSpan) -> list[ChatTurn]:
        # The conversation so far, read from the workflow like context texts: each turn
        # is stored in history once, however many model calls see it.
        info = activity.info()
        handle = self._temporal.get_workflow_handle(info.workflow_id, run_id=info.workflow_run_id)
        return await handle.query("context_messages", conversation, result_type=list[ChatTurn])

    async def resolve(self, request: LLMRequest) -> ResolvedContext:
        """The texts `request` names (each message's references, and its conversation's
        turns): handed over when this call's workflow scheduled it in this worker process
        (durafact/_runtime/handoff.py), else read with the workflow's queries."""
        info = activity.info()
        run_id = info.workflow_run_id or ""
        handed = self._handed(run_id, info.activity_id) if self._handed else None
        if handed:
            texts = handed.texts
        else:
            refs = [message.references() for message in request.messages]
            found = iter(await asyncio.gather(*(self._context_texts(r) for r in refs if r)))
            texts = tuple(tuple(next(found)) if r else () for r in refs)
        conversation = request.conversation
        turns = None
        if conversation is not None and conversation.count:
            turns = (
                handed.turns
                if handed and handed.turns is not None
                else tuple(await self._context_messages(conversation))
            )
        return ResolvedContext(texts=texts, turns=turns)

    async def _tool_schemas_for(self, names: list[str]) -> list[dict[str, Any]]:
        key = tuple(names)
        cached = self._tool_schemas.get(key)
        if cached is not None:
            return cached
        if self._tools is None:
            raise ApplicationError(
                f"the request names tools {names} but this worker has no tools: configure "
                "them on the worker (Python tools or --mcp servers)",
                type=NO_TOOLS,
                non_retryable=True,
            )
        specs = {spec.name: spec for spec in await self._tools.specs(list(names))}
        missing = [name for name in names if name not in specs]
        if missing:
            raise ApplicationError(
                f"tools {missing} are not known to this worker: no Python tool or MCP tool "
                "(SERVER__TOOL) of that name is configured on it",
                type=UNKNOWN_TOOL,
                non_retryable=True,
            )
        schemas = [tool_schema(specs[name]) for name in names]
        self._tool_schemas[key] = schemas
        return schemas

    async def _streamed(
        self,
        endpoint: str,
        messages: list[dict[str, Any]],
        kwargs: dict[str, Any],
        target: StreamTo,
        stops: bool,
        named: str | None,
    ) -> LLMResponse | Any:
        """The reply, streamed from the endpoint and published to the workflow's stream
        as it comes (batched every STREAM_INTERVAL); when the endpoint does not stream,
        what `_stream_response` returned instead (a whole answer), or None when it refused
        to stream (400: the whole request then tells whether the request itself was bad).
        Errors name the endpoint as `named` (see classify_error)."""
        llm = self._endpoints[endpoint]
        try:
            try:
                stream = await self._without_refused_key(
                    endpoint,
                    kwargs,
                    functools.partial(_stream_response, llm, messages, kwargs),
                    named_only=True,
                )
            except openai.BadRequestError:
                return None
            if not isinstance(stream, openai.AsyncStream):
                return stream
            reply = _Streamed()
            attempt = activity.info().attempt
            # Flushed here, never by the client's background flusher (`async with`): on
            # Python 3.11 cancelling that flusher as a forced flush wakes it can be lost
            # in asyncio.wait_for, and the activity then hangs on exit (seen in a test).
            publisher = WorkflowStreamClient.from_within_activity()
            topic = publisher.topic(target.topic, type=TextChunk)
            # The text of an interval goes as one chunk: an item per token would make the
            # stream's signals (and the workflow's history) many times the reply's size.
            pending, index, sent_at = "", 0, time.monotonic()

            async def publish() -> None:
                nonlocal pending, index, sent_at
                topic.publish(TextChunk(key=target.key, attempt=attempt, index=index, text=pending))
                pending, index, sent_at = "", index + 1, time.monotonic()
                # Best effort: a batch not sent goes with the next flush; the reply is the result.
                with contextlib.suppress(RPCError, TimeoutError):
                    await publisher.flush()

            async for chunk in stream:
                pending += reply.add(chunk)
                due = index == 0 or time.monotonic() - sent_at >= STREAM_INTERVAL.total_seconds()
                if pending and due:  # the first words at once, then an interval's worth
                    await publish()
            if pending:
                await publish()
        except openai.OpenAIError as exc:
            raise classify_error(exc, named) from None  # see classify_error
        response = reply.response()
        if not response.text.strip() and not response.tool_calls and not stops:
            raise ApplicationError("model returned an empty answer", type="EmptyModelOutput")
        return response

    @activity.defn(name="request_model")
    async def request_model(self, request: LLMRequest) -> LLMResponse:
        return await self.answer(request, await self.resolve(request))

    async def answer(self, request: LLMRequest, context: ResolvedContext) -> LLMResponse:
        """The model's answer to `request`, whose references `context` resolves (see
        `resolve`), priced by the worker's table."""
        response = await self._answer(request, context)
        usage = response.usage.model_copy(update={"cost": None})
        if self._prices is not None:
            asked = self._model_for(request, response.endpoint)
            usage = self._prices.priced(usage, response.model, asked)
        return response.model_copy(update={"usage": usage})

    def model_for(self, request: LLMRequest) -> str:
        """The model `request` asks its first endpoint for."""
        return self._model_for(request, (request.endpoint or DEFAULT_ENDPOINT).lower())

    def _model_for(self, request: LLMRequest, endpoint: str) -> str:
        """The model a request asks `endpoint` for: its own, the endpoint's, the worker's."""
        return request.model or self._models.get(endpoint, self._default_model)

    async def _answer(self, request: LLMRequest, context: ResolvedContext) -> LLMResponse:
        """The model's answer to `request`, with the tokens the endpoint reported."""
        info = activity.info()
        endpoint = self._endpoint_for(request, info)
        llm = self._endpoints[endpoint]
        # Errors name the endpoint when the call may move, or went to a named one.
        named = endpoint if request.fallback or endpoint != DEFAULT_ENDPOINT else None
        output_type = self._output_type(request.output_type) if request.output_type else None
        tools = await self._tool_schemas_for(request.tools) if request.tools else []
        tools = [*tools, *(tool_schema(spec) for spec in request.tool_specs)]
        messages = render_messages(request.messages, context)
        kwargs: dict[str, Any] = {
            "model": self._model_for(request, endpoint),
            # Lets the endpoint's logs (and the tests' scripted server) tie a request to
            # the activity attempt that made it; ids may hold any text, headers only ASCII.
            "extra_headers": {
                "X-Durafact-Workflow-Id": quote(info.workflow_id, safe=""),
                "X-Durafact-Activity-Id": quote(info.activity_id, safe=""),
                "X-Durafact-Attempt": str(info.attempt),
            },
        }
        if info.workflow_run_id and endpoint not in self._no_cache_key:
            kwargs[CACHE_KEY] = info.workflow_run_id
        if request.temperature is not None:
            kwargs["temperature"] = request.temperature
        if request.max_tokens is not None:
            kwargs["max_tokens"] = request.max_tokens
        if request.stop:
            kwargs["stop"] = request.stop
        if tools:
            # Parallel calls are the API's default: one turn may ask for several.
            kwargs["tools"] = tools
        if output_type is not None:
            kwargs["response_format"] = {
                "type": "json_schema",
                "json_schema": {
                    "name": output_type.__name__,
                    "schema": strict_json_schema(output_type),
                    "strict": True,
                },
            }

        whole = None  # an answer the endpoint sent whole when asked to stream
        if request.stream is not None and output_type is None and endpoint not in self._whole:
            streamed = await heartbeating(
                self._streamed(
                    endpoint, messages, kwargs, request.stream, bool(request.stop), named
                )
            )
            if isinstance(streamed, LLMResponse):
                streamed.endpoint = endpoint
                return streamed
            self._whole.add(endpoint)  # it does not stream: ask it for whole replies from now
            whole = streamed

        usage = Usage()
        error = ""
        attempts = request.validation_attempts if output_type else 1
        for attempt in range(1, attempts + 1):
            try:
                answer = (
                    whole
                    if whole is not None
                    else await heartbeating(
                        self._without_refused_key(
                            endpoint, kwargs, functools.partial(_create, llm, messages, kwargs)
                        )
                    )
                )
                whole = None
            except openai.OpenAIError as exc:
                # Its message may hold a URL: see classify_error.
                raise classify_error(exc, named) from None
            except json.JSONDecodeError as exc:  # a JSON content type, a body that is not
                raise not_a_chat_completion(f"a body that is not JSON ({exc})") from None
            except RecursionError:
                raise not_a_chat_completion("JSON nested too deeply to read") from None
            except ValueError as exc:  # e.g. an integer of more than 4300 digits
                raise not_a_chat_completion(f"JSON it cannot read ({exc})") from None
            completion = chat_completion(answer)
            if completion.usage is not None:
                usage += usage_of(completion.usage)
            choice = completion.choices[0] if completion.choices else None
            message = choice.message if choice is not None else None
            text = (message.content or "") if message is not None else ""
            response = LLMResponse(
                text=text,
                tool_calls=tool_calls_of(message),
                usage=usage,
                model=completion.model if isinstance(completion.model, str) else "",
                endpoint=endpoint,
                attempts=attempt,
                finish_reason=finish_reason_of(choice),
            )
            if response.tool_calls:
                return response  # the model acts first; its text (often none) comes along
            if output_type is None:
                # With stop sequences an empty reply is an answer (the model stopped at
                # once); the caller's protocol decides what it means.
                if not text.strip() and not request.stop:
                    # Asked again, but not until the deadline: unlike an outage, an empty
                    # answer may be the model's own answer to this prompt.
                    last = info.attempt >= EMPTY_ANSWER_ATTEMPTS
                    raise ApplicationError(
                        f"model returned an empty answer (attempt {info.attempt})",
                        type="EmptyModelOutput",
                        non_retryable=last,
                    )
                return response
            try:
                value = output_type.model_validate_json(text)
            except ValidationError as exc:
                error = _short_errors(exc)
                activity.logger.warning(
                    "model output did not validate (ask %d): %s", attempt, error
                )
                # Ask again with the model's own answer and what was wrong with it.
                messages = messages + [
                    {"role": "assistant", "content": text},
                    {
                        "role": "user",
                        "content": "That answer does not match the required JSON schema: "
                        f"{error}. Reply again with only JSON that matches the schema.",
                    },
                ]
                continue
            # The validated value only: the raw JSON text would store it twice in history.
            response.text = ""
            response.data = value.model_dump(mode="json")
            return response
        raise ApplicationError(
            f"model output did not match {output_type.__name__} after {attempts} asks: {error}",
            type="InvalidModelOutput",
            non_retryable=True,
        )


STREAM_INTERVAL = timedelta(milliseconds=100)


async def _create(
    llm: openai.AsyncOpenAI, messages: list[dict[str, Any]], kwargs: dict[str, Any]
) -> Any:
    """`chat.completions.create`, posted as the client's documented way to send a body
    as it is: `create` first walks every message against its typed parameters, which
    took 33 ms for a 200-message conversation here, on every call of a long tool loop.
    The messages are plain JSON already; the client, its errors and its parsing into a
    `ChatCompletion` are the same."""
    body = {k: v for k, v in kwargs.items() if k != "extra_headers"}
    return await llm.post(
        "/chat/completions",
        body={"messages": messages, **body},
        cast_to=ChatCompletion,
        options={"headers": kwargs.get("extra_headers", {})},
    )


async def _stream_response(
    llm: openai.AsyncOpenAI, messages: list[dict[str, Any]], kwargs: dict[str, Any]
) -> Any:
    """The endpoint's streamed answer (an `AsyncStream`); or, when it answered with a
    whole completion instead of server-sent events, that answer (a `ChatCompletion`, or
    the body's text when it is not JSON), which is paid for and must not be asked for
    again."""
    raw = await llm.chat.completions.with_raw_response.create(
        messages=messages, stream=True, stream_options={"include_usage": True}, **kwargs
    )
    if "text/event-stream" in raw.http_response.headers.get("content-type", ""):
        return raw.parse()
    body = await raw.http_response.aread()
    try:
        data = json.loads(body)
    except ValueError:
        return body.decode("utf-8", "replace")
    return ChatCompletion.construct(**data) if isinstance(data, dict) else data


class _Streamed:
    """A reply put together from its chunks: text, tool calls by index, usage."""

    def __init__(self) -> None:
        self.parts: list[str] = []
        self.calls: dict[int, dict[str, str]] = {}
        self.usage = Usage()
        self.model = ""
        self.finish_reason = "stop"

    def add(self, chunk: Any) -> str:
        """Take one chunk in; the text it adds."""
        if isinstance(getattr(chunk, "model", None), str):
            self.model = chunk.model
        if getattr(chunk, "usage", None) is not None:
            self.usage = usage_of(chunk.usage)
        added = ""
        for choice in getattr(chunk, "choices", None) or []:
            if getattr(choice, "finish_reason", None):
                self.finish_reason = finish_reason_of(choice)
            delta = choice.delta
            if delta.content:
                added += delta.content
            for call in delta.tool_calls or []:
                slot = self.calls.setdefault(call.index, {"id": "", "name": "", "arguments": ""})
                slot["id"] = call.id or slot["id"]
                if call.function is not None:
                    slot["name"] += call.function.name or ""
                    slot["arguments"] += call.function.arguments or ""
        self.parts.append(added)
        return added

    def response(self) -> LLMResponse:
        calls = [
            ToolCall(id=c["id"], name=c["name"], arguments=parse_arguments(c["arguments"]))
            for _, c in sorted(self.calls.items())
        ]
        return LLMResponse(
            text="".join(self.parts),
            tool_calls=calls,
            usage=self.usage,
            model=self.model,
            finish_reason=self.finish_reason,
        )


def finish_reason_of(choice: Any) -> str:
    """The choice's `finish_reason` as the endpoint sent it (`stop` when it sent none)."""
    reason = getattr(choice, "finish_reason", None)
    return reason if isinstance(reason, str) and reason else "stop"


def _short_errors(exc: ValidationError, limit: int = 3) -> str:
    errors = exc.errors()[:limit]
    return "; ".join(f"{'.'.join(map(str, e['loc'])) or 'value'}: {e['msg']}" for e in errors)
