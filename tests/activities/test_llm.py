"""The model activity's contract: Temporal owns retries, request errors fail at once,
structured output is validated and re-asked, usage is reported, and an output model is
looked up among the registered ones, never imported from what a workflow sends."""

from __future__ import annotations

import time
import uuid
from datetime import timedelta
from pathlib import Path

from pydantic import BaseModel
from temporalio import workflow

from workflows import Goal, Plan, PlanExecuteResult, PlanExecuteWorkflow, RecipeContext
from workflows.recipe import Recipe

# The workflow sandbox re-imports this module (HaikuWorkflow); the rest is not workflow code.
with workflow.unsafe.imports_passed_through():
    import httpx
    import openai
    import pytest
    from temporalio.client import Client, WorkflowFailureError
    from temporalio.exceptions import ActivityError, ApplicationError
    from temporalio.testing import ActivityEnvironment

    from activities import ModelActivities, classify_error, retry_after
    from cli.settings import Settings
    from cli.worker import build_worker
    from durafact.llm import ChatMessage, LLMRequest, strict_json_schema, type_path
    from tests.scripted_model import ScriptedModel

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
    async with build_worker(client, settings, extra_workflows=[HaikuWorkflow]):
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
    async with build_worker(
        client, settings, extra_workflows=[HaikuWorkflow], output_models=[Haiku]
    ):
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
