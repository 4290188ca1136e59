"""The model activity's contract: Temporal owns retries, request errors fail at once,
structured output is validated and re-asked, usage is reported, and an output model is
looked up among the registered ones, never imported from what a workflow sends. A
conversation travels as a reference and reaches the model as chat messages with tool
calls and ids; named tools reach it as function schemas; its tool calls come back parsed."""

from __future__ import annotations

import dataclasses
import json
import threading
import time
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from pydantic import BaseModel
from temporalio import workflow

from durafact._recipes import Goal, Plan, PlanExecuteResult, PlanExecuteWorkflow, RecipeContext
from durafact._recipes.recipe import Recipe

# The workflow sandbox re-imports this module (HaikuWorkflow); the rest is not workflow code.
with workflow.unsafe.imports_passed_through():
    import httpx
    import openai
    import pytest
    from temporalio.client import Client, WorkflowFailureError
    from temporalio.exceptions import ActivityError, ApplicationError
    from temporalio.testing import ActivityEnvironment
    from temporalio.worker import Worker

    from durafact._activities import ModelActivities, classify_error, retry_after
    from durafact._activities.llm import EMPTY_ANSWER_ATTEMPTS
    from durafact._core.llm import (
        ArtifactSpan,
        ChatMessage,
        ChatTurn,
        LLMRequest,
        LLMResponse,
        strict_json_schema,
        type_path,
    )
    from durafact._core.tools import ToolCall, ToolSpec, parse_arguments
    from durafact._runtime.plugin import with_passthrough
    from durafact._runtime.settings import Settings
    from durafact._runtime.worker import build_worker
    from durafact.testing import ScriptedModel, ToolCalls
    from tests.helpers import scheduled_activities

is_plan = lambda call: call.schema_name == "Plan"  # noqa: E731


async def run(client: Client, settings: Settings) -> PlanExecuteResult:
    return await client.execute_workflow(
        PlanExecuteWorkflow.run,
        Goal(text="Write a haiku"),
        id=f"llm-{uuid.uuid4().hex[:8]}",
        task_queue=settings.task_queue,
    )


async def failure_of(client: Client, settings: Settings) -> ApplicationError:
    with pytest.raises(WorkflowFailureError) as raised:
        await run(client, settings)
    activity_error = raised.value.cause
    assert isinstance(activity_error, ActivityError)
    assert isinstance(activity_error.cause, ApplicationError)
    return activity_error.cause


async def test_rate_limit_waits_for_retry_after_then_succeeds(
    client: Client, worker: Settings, model: ScriptedModel
) -> None:
    # retry-after (3 s) is longer than the retry policy's first interval (1 s), so the
    # gap between the two attempts shows which of them Temporal honoured.
    model.fail(429, when=is_plan, headers={"retry-after": "3"})
    result = await run(client, worker)

    plan_calls = model.calls_for("llm:plan:")
    assert [c.attempt for c in plan_calls] == [1, 2]
    assert plan_calls[1].received - plan_calls[0].received >= 2.5
    assert len(result.steps) == 3


async def test_server_error_is_retried_then_succeeds(
    client: Client, worker: Settings, model: ScriptedModel
) -> None:
    model.fail(500, when=is_plan)
    result = await run(client, worker)
    assert [c.attempt for c in model.calls_for("llm:plan:")] == [1, 2]
    assert result.answer.text


async def test_bad_credentials_fail_at_once_without_retries(
    client: Client, worker: Settings, model: ScriptedModel
) -> None:
    model.fail(401, when=is_plan, times=10)
    error = await failure_of(client, worker)
    assert error.type == "AuthenticationFailed"
    assert error.non_retryable
    assert "401" in error.message
    assert len(model.calls) == 1


async def test_output_that_does_not_validate_is_asked_again_with_the_error(
    client: Client, worker: Settings, model: ScriptedModel
) -> None:
    model.fail(200, when=is_plan, content='{"steps": []}')
    result = await run(client, worker)

    first, second = model.calls_for("llm:plan:")
    assert first.attempt == second.attempt == 1  # asked again inside one activity attempt
    assert "does not match the required JSON schema" in second.last_user
    assert "steps" in second.last_user
    assert len(result.steps) == 3
    # Usage counts every ask, the failed one included.
    assert result.usage.total_tokens > 0


async def test_output_that_never_validates_fails_clearly(
    client: Client, worker: Settings, model: ScriptedModel
) -> None:
    model.fail(200, when=is_plan, content="I cannot do JSON", times=10)
    error = await failure_of(client, worker)
    assert error.type == "InvalidModelOutput"
    assert error.non_retryable
    assert "Plan" in error.message and "3 asks" in error.message
    assert len(model.calls) == 3


async def test_structured_requests_send_a_strict_json_schema(
    client: Client, worker: Settings, model: ScriptedModel
) -> None:
    await run(client, worker)
    plan_call = model.calls_for("llm:plan:")[0]
    assert plan_call.body["response_format"] == {
        "type": "json_schema",
        "json_schema": {"name": "Plan", "schema": strict_json_schema(Plan), "strict": True},
    }
    schema = strict_json_schema(Plan)
    assert schema["additionalProperties"] is False
    assert schema["required"] == ["steps"]
    step_call = model.calls_for("llm:step:")[0]
    assert "response_format" not in step_call.body


class Haiku(BaseModel):
    lines: list[str]


@workflow.defn
class HaikuWorkflow(Recipe[Goal, Haiku]):
    @workflow.run
    async def run(self, goal: Goal) -> Haiku:
        return await self.execute(goal)

    async def lifecycle(self, ctx: RecipeContext, goal: Goal) -> Haiku:
        return await ctx.llm.structured(Haiku, goal.text)


async def run_haiku(client: Client, settings: Settings) -> Haiku:
    return await client.execute_workflow(
        HaikuWorkflow.run,
        Goal(text="A haiku on retries"),
        id=f"haiku-{uuid.uuid4().hex[:8]}",
        task_queue=settings.task_queue,
    )


async def test_an_unregistered_output_model_fails_at_once_saying_how_to_register_it(
    client: Client, settings: Settings, model: ScriptedModel
) -> None:
    async with build_worker(client, settings, workflows=[HaikuWorkflow]):
        with pytest.raises(WorkflowFailureError) as raised:
            await run_haiku(client, settings)
    error = raised.value.cause.cause
    assert isinstance(error, ApplicationError)
    assert (error.type, error.non_retryable) == ("UnknownOutputType", True)
    assert f"output type {type_path(Haiku)!r} is not registered with this worker" in error.message
    assert "OUTPUT_MODELS" in error.message and "--recipes" in error.message
    assert model.calls == []  # refused before the model was asked


async def test_a_registered_output_model_is_asked_for_and_validated(
    client: Client, settings: Settings, model: ScriptedModel
) -> None:
    model.reply(lambda call: {"lines": ["one", "two", "three"]})
    async with build_worker(client, settings, workflows=[HaikuWorkflow], output_models=[Haiku]):
        haiku = await run_haiku(client, settings)
    assert haiku == Haiku(lines=["one", "two", "three"])
    assert model.calls[0].schema_name == "Haiku"


async def test_the_activity_never_imports_a_module_named_in_its_input(
    model: ScriptedModel, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A module that would leave a mark if anything imported it.
    (tmp_path / "planted.py").write_text(
        "import pathlib\n"
        f"pathlib.Path({str(tmp_path / 'imported')!r}).write_text('yes')\n"
        "from pydantic import BaseModel\n"
        "class Payload(BaseModel):\n"
        "    x: int\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    llm = openai.AsyncOpenAI(base_url=model.url, api_key="test", max_retries=0)
    models = ModelActivities(llm, None, "scripted", output_models=[Plan])  # type: ignore[arg-type]
    request = LLMRequest(
        messages=[ChatMessage(role="user", content="hi")], output_type="planted:Payload"
    )
    try:
        with pytest.raises(ApplicationError) as raised:
            await ActivityEnvironment().run(models.request_model, request)
    finally:
        await llm.close()
    assert raised.value.type == "UnknownOutputType"
    assert not (tmp_path / "imported").exists()
    assert model.calls == []


async def test_an_empty_answer_is_asked_again_a_few_times_not_until_the_deadline(
    model: ScriptedModel,
) -> None:
    model.reply(lambda call: "")
    llm = openai.AsyncOpenAI(base_url=model.url, api_key="test", max_retries=0)
    models = ModelActivities(llm, None, "scripted")  # type: ignore[arg-type]
    request = LLMRequest(messages=[ChatMessage(role="user", content="hi")])
    errors = []
    try:
        for attempt in (1, EMPTY_ANSWER_ATTEMPTS - 1, EMPTY_ANSWER_ATTEMPTS):
            environment = ActivityEnvironment()
            environment.info = dataclasses.replace(environment.info, attempt=attempt)
            with pytest.raises(ApplicationError) as raised:
                await environment.run(models.request_model, request)
            errors.append(raised.value)
    finally:
        await llm.close()
    assert {error.type for error in errors} == {"EmptyModelOutput"}
    # Retried like an outage at first, but the last attempt fails the call for good.
    assert [error.non_retryable for error in errors] == [False, False, True]
    assert errors[-1].message == f"model returned an empty answer (attempt {EMPTY_ANSWER_ATTEMPTS})"


def status_error(status: int, headers: dict[str, str] | None = None) -> openai.APIStatusError:
    request = httpx.Request("POST", "http://model/v1/chat/completions")
    response = httpx.Response(status, headers=headers or {}, request=request)
    return openai.APIStatusError(f"status {status}", response=response, body=None)


@pytest.mark.parametrize(
    ("status", "kind"),
    [
        (400, "BadRequest"),
        (401, "AuthenticationFailed"),
        (403, "PermissionDenied"),
        (404, "ModelNotFound"),
        (422, "UnprocessableRequest"),
    ],
)
def test_request_errors_are_not_retryable(status: int, kind: str) -> None:
    error = classify_error(status_error(status))
    assert (error.type, error.non_retryable) == (kind, True)


@pytest.mark.parametrize(
    ("status", "kind"),
    [(408, "RequestTimeout"), (409, "Conflict"), (429, "RateLimited"), (503, "ServerError")],
)
def test_transient_errors_are_retryable(status: int, kind: str) -> None:
    error = classify_error(status_error(status, {"retry-after": "7"}))
    assert (error.type, error.non_retryable) == (kind, False)
    assert error.next_retry_delay == timedelta(seconds=7)


def test_timeouts_and_connection_errors_are_retryable() -> None:
    request = httpx.Request("POST", "http://model/v1/chat/completions")
    timeout = classify_error(openai.APITimeoutError(request))
    refused = classify_error(openai.APIConnectionError(request=request))
    assert (timeout.type, timeout.non_retryable) == ("ModelTimeout", False)
    assert (refused.type, refused.non_retryable) == ("ModelUnreachable", False)


def test_retry_after_reads_milliseconds_seconds_and_dates() -> None:
    assert retry_after(httpx.Headers({"retry-after-ms": "1500"})) == timedelta(seconds=1.5)
    assert retry_after(httpx.Headers({"retry-after": "2"})) == timedelta(seconds=2)
    date = time.strftime("%a, %d %b %Y %H:%M:%S GMT", time.gmtime(time.time() + 30))
    delay = retry_after(httpx.Headers({"retry-after": date}))
    assert delay is not None and timedelta(seconds=25) < delay <= timedelta(seconds=30)
    assert retry_after(httpx.Headers({"retry-after": "3600"})) == timedelta(minutes=5)
    assert retry_after(httpx.Headers({})) is None
    assert retry_after(httpx.Headers({"retry-after": "soon"})) is None


# A tool loop two turns in: the user asked, the model called two tools at once, and
# both answered. The workflow stores these turns; the model activity reads them.
CONVERSATION = [
    ChatTurn(role="user", content="Is it warmer in Oslo or in Bergen?"),
    ChatTurn(
        role="assistant",
        tool_calls=[
            ToolCall(id="call_oslo", name="weather", arguments={"city": "Oslo"}),
            ToolCall(id="call_bergen", name="weather", arguments={"city": "Bergen", "unit": "C"}),
        ],
    ),
    ChatTurn(role="tool", tool_call_id="call_oslo", name="weather", content="Oslo: 4 C, rain"),
    ChatTurn(role="tool", tool_call_id="call_bergen", name="weather", content="Bergen: 7 C"),
]
SYSTEM = "Answer with the weather tool."

WEATHER = ToolSpec(
    name="weather",
    description="Current weather in a city.",
    parameters={
        "type": "object",
        "properties": {"city": {"type": "string"}, "unit": {"enum": ["C", "F"]}},
        "required": ["city"],
    },
)
CALCULATOR = ToolSpec(
    name="calculator",
    description="Evaluate arithmetic.",
    parameters={"type": "object", "properties": {"expression": {"type": "string"}}},
)


class TurnRequest(BaseModel):
    tools: list[str] = []
    stop: list[str] | None = None


@workflow.defn
class ToolTurnWorkflow(Recipe[TurnRequest, LLMResponse]):
    """One model turn of a tool loop over CONVERSATION, stored as `msg:` artifacts."""

    @workflow.run
    async def run(self, request: TurnRequest) -> LLMResponse:
        return await self.execute(request)

    async def lifecycle(self, ctx: RecipeContext, request: TurnRequest) -> LLMResponse:
        run = workflow.info().workflow_id
        for n, turn in enumerate(CONVERSATION):
            ctx.ledger.create(f"msg:{run}:{n}", turn)
        return await ctx.llm.request(
            [ChatMessage(role="system", content=SYSTEM)],
            conversation=ArtifactSpan(prefix=f"msg:{run}:", count=len(CONVERSATION)),
            tools=request.tools,
            stop=request.stop,
        )


class Catalog:
    """The smallest tool catalog: specs by name, and a count of how often it was asked."""

    def __init__(self, *specs: ToolSpec) -> None:
        self._specs = {spec.name: spec for spec in specs}
        self.asked: list[list[str]] = []

    async def specs(self, names: list[str]) -> list[ToolSpec]:
        self.asked.append(names)
        return [self._specs[name] for name in names if name in self._specs]


@asynccontextmanager
async def tool_worker(
    client: Client, settings: Settings, model: ScriptedModel, catalog: Catalog | None
) -> AsyncIterator[None]:
    llm = openai.AsyncOpenAI(base_url=model.url, api_key="test", max_retries=0)
    models = ModelActivities(llm, client, "scripted", tools=catalog)
    try:
        async with Worker(
            client,
            task_queue=settings.task_queue,
            workflows=[ToolTurnWorkflow],
            activities=[models.request_model],
            workflow_runner=with_passthrough(None),
        ):
            yield
    finally:
        await llm.close()


async def run_turn(client: Client, settings: Settings, request: TurnRequest) -> LLMResponse:
    return await client.execute_workflow(
        ToolTurnWorkflow.run,
        request,
        id=f"turn-{uuid.uuid4().hex[:8]}",
        task_queue=settings.task_queue,
    )


async def test_a_conversation_reaches_the_model_in_order_with_roles_ids_and_arguments(
    client: Client, settings: Settings, model: ScriptedModel
) -> None:
    model.reply(lambda call: "Bergen is warmer.")
    workflow_id = f"turn-{uuid.uuid4().hex[:8]}"
    async with tool_worker(client, settings, model, None):
        handle = await client.start_workflow(
            ToolTurnWorkflow.run, TurnRequest(), id=workflow_id, task_queue=settings.task_queue
        )
        response = await handle.result()

    assert response.text == "Bergen is warmer."
    (call,) = model.calls
    assert call.messages == [
        {"role": "system", "content": SYSTEM},
        {"role": "user", "content": "Is it warmer in Oslo or in Bergen?"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "call_oslo",
                    "type": "function",
                    "function": {"name": "weather", "arguments": '{"city": "Oslo"}'},
                },
                {
                    "id": "call_bergen",
                    "type": "function",
                    "function": {
                        "name": "weather",
                        "arguments": '{"city": "Bergen", "unit": "C"}',
                    },
                },
            ],
        },
        {
            "role": "tool",
            "content": "Oslo: 4 C, rain",
            "tool_call_id": "call_oslo",
            "name": "weather",
        },
        {
            "role": "tool",
            "content": "Bergen: 7 C",
            "tool_call_id": "call_bergen",
            "name": "weather",
        },
    ]
    assert "tools" not in call.body and "stop" not in call.body
    # History holds the reference, never the conversation's texts again.
    (scheduled,) = await scheduled_activities(client, handle)
    assert scheduled.input["conversation"] == {"prefix": f"msg:{workflow_id}:", "count": 4}
    assert "Oslo: 4 C" not in json.dumps(scheduled.input)


async def test_named_tools_reach_the_model_as_function_schemas_listed_once(
    client: Client, settings: Settings, model: ScriptedModel
) -> None:
    catalog = Catalog(WEATHER, CALCULATOR)
    model.reply(lambda call: "Bergen is warmer.")
    async with tool_worker(client, settings, model, catalog):
        for _ in range(2):
            await run_turn(client, settings, TurnRequest(tools=["weather", "calculator"]))

    for call in model.calls:
        assert call.body["tools"] == [
            {
                "type": "function",
                "function": {
                    "name": "weather",
                    "description": "Current weather in a city.",
                    "parameters": WEATHER.parameters,
                },
            },
            {
                "type": "function",
                "function": {
                    "name": "calculator",
                    "description": "Evaluate arithmetic.",
                    "parameters": CALCULATOR.parameters,
                },
            },
        ]
    assert len(model.calls) == 2
    assert catalog.asked == [["weather", "calculator"]]  # the worker remembers the schemas


async def test_stop_sequences_reach_the_model(
    client: Client, settings: Settings, model: ScriptedModel
) -> None:
    model.reply(lambda call: "Thought: look it up\nAction: weather")
    async with tool_worker(client, settings, model, None):
        await run_turn(client, settings, TurnRequest(stop=["Observation:"]))
    assert model.calls[0].body["stop"] == ["Observation:"]


async def test_tool_calls_come_back_parsed_and_arguments_that_are_not_an_object_stay_raw(
    client: Client, settings: Settings, model: ScriptedModel
) -> None:
    model.reply(
        lambda call: ToolCalls(
            calls=[
                ("weather", {"city": "Oslo"}),
                ("weather", '{"city": "Bergen"'),  # cut off mid-object
                ("calculator", '["2+2"]'),  # JSON, but not an object
            ],
            ids=["a", "b", "c"],
        )
    )
    async with tool_worker(client, settings, model, Catalog(WEATHER, CALCULATOR)):
        response = await run_turn(client, settings, TurnRequest(tools=["weather", "calculator"]))

    # No text besides the calls is an answer, not an EmptyModelOutput.
    assert response.text == ""
    assert response.tool_calls == [
        ToolCall(id="a", name="weather", arguments={"city": "Oslo"}),
        ToolCall(id="b", name="weather", arguments='{"city": "Bergen"'),
        ToolCall(id="c", name="calculator", arguments='["2+2"]'),
    ]
    assert response.usage.total_tokens > 0


async def test_a_request_naming_tools_fails_at_once_on_a_worker_without_them(
    model: ScriptedModel,
) -> None:
    llm = openai.AsyncOpenAI(base_url=model.url, api_key="test", max_retries=0)
    request = LLMRequest(messages=[ChatMessage(role="user", content="hi")], tools=["weather"])
    without_tools = ModelActivities(llm, None, "scripted")  # type: ignore[arg-type]
    other_tools = ModelActivities(llm, None, "scripted", tools=Catalog(CALCULATOR))  # type: ignore[arg-type]
    try:
        with pytest.raises(ApplicationError) as no_tools:
            await ActivityEnvironment().run(without_tools.request_model, request)
        with pytest.raises(ApplicationError) as unknown:
            await ActivityEnvironment().run(other_tools.request_model, request)
    finally:
        await llm.close()
    assert (no_tools.value.type, no_tools.value.non_retryable) == ("NoToolsOnWorker", True)
    assert "has no tools" in no_tools.value.message
    assert (unknown.value.type, unknown.value.non_retryable) == ("UnknownTool", True)
    assert "tools ['weather'] are not known to this worker" in unknown.value.message
    assert model.calls == []


class NotAModel:
    """A loopback server that answers every POST with 200 and a fixed body: a login page,
    another API, a proxy's error page."""

    def __init__(self, content_type: str, body: bytes) -> None:
        answer = (content_type, body)
        self.requests = 0

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:
                pass

            def do_POST(self) -> None:
                server.requests += 1
                self.rfile.read(int(self.headers.get("content-length", 0)))
                self.send_response(200)
                self.send_header("content-type", answer[0])
                self.send_header("content-length", str(len(answer[1])))
                self.end_headers()
                self.wfile.write(answer[1])

        server = self
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}/v1"

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()


@pytest.mark.parametrize(
    ("content_type", "body", "said"),
    [
        ("text/html", b"<html><body>Please sign in</body></html>", "Please sign in"),
        ("application/json", b'{"object": "list", "data": []}', "without a 'choices' list"),
        ("application/json", b'{"choices": [{"message": "hi"}]}', "without a message object"),
        ("application/json", b"[1, 2]", "JSON of another kind"),
        ("application/json", b"<html>not json</html>", "a body that is not JSON"),
        ("application/json", b"[" * 100_000 + b"]" * 100_000, "JSON nested too deeply"),
        ("application/json", b'{"created": ' + b"7" * 5000 + b"}", "JSON it cannot read"),
    ],
)
async def test_an_answer_that_is_not_a_chat_completion_fails_at_once_saying_so(
    content_type: str, body: bytes, said: str
) -> None:
    server = NotAModel(content_type, body)
    llm = openai.AsyncOpenAI(base_url=server.url, api_key="test", max_retries=0)
    models = ModelActivities(llm, None, "scripted")  # type: ignore[arg-type]
    request = LLMRequest(messages=[ChatMessage(role="user", content="hi")])
    try:
        with pytest.raises(ApplicationError) as raised:
            await ActivityEnvironment().run(models.request_model, request)
    finally:
        await llm.close()
        server.stop()
    # Not retryable: Temporal makes no second attempt (it used to be an AttributeError
    # on 'usage', retried six times).
    assert (raised.value.type, raised.value.non_retryable) == ("NotAChatCompletion", True)
    assert said in raised.value.message
    assert "not a chat completion" in raised.value.message
    assert server.requests == 1


def test_tool_arguments_nested_past_the_parsers_depth_stay_raw() -> None:
    deep = "[" * 100_000 + "]" * 100_000
    assert parse_arguments(deep) == deep
    assert parse_arguments('{"x": 1}') == {"x": 1}
