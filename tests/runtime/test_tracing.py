"""Traces: a plan on a worker whose plugin has a tracer provider (here with the SDK's
in-memory exporter) makes Temporal's spans and one GenAI span per model call, no
prompt text unless asked, and none twice when every workflow task is replayed."""

from __future__ import annotations

import json
import uuid
from collections.abc import Sequence
from typing import Any

import pytest
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from temporalio.client import Client
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import Worker

from durafact._recipes import Goal, PlanExecuteWorkflow, ReActInput, ReActWorkflow
from durafact._recipes.plan_execute import GOAL_SYSTEM
from durafact._runtime.settings import SettingsError
from durafact._runtime.tracing import TracingConfigError, otlp_url, provider_from_env
from durafact.testing import ScriptedModel
from tests.workflows.test_plan_execute import GOAL, numbered_steps
from tests.workflows.test_react import act, final, turns

SYSTEM = GOAL_SYSTEM.split("{goal}")[0]  # the plan's system prompt, without the goal
PLAN = Goal(text=GOAL)


async def traced_run(
    env: WorkflowEnvironment,
    model: ScriptedModel,
    trace_env: dict[str, str],
    run: Any = PlanExecuteWorkflow.run,
    arg: Any = PLAN,
) -> tuple[str, str, Sequence[ReadableSpan]]:
    """One run (a plan unless said), started and run with tracing on; every workflow
    task is replayed from the start of the history (no workflow cache), as after a
    worker restart."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    plugin = model.plugin(tracing=provider, env=trace_env)
    client = await Client.connect(env.client.service_client.config.target_host, plugins=[plugin])
    queue = f"trace-{uuid.uuid4().hex[:8]}"
    async with Worker(client, task_queue=queue, max_cached_workflows=0):
        handle = await client.start_workflow(run, arg, id=f"run-{queue}", task_queue=queue)
        await handle.result()
    return handle.id, handle.result_run_id or "", exporter.get_finished_spans()


async def test_a_plan_makes_a_workflow_span_and_a_genai_span_per_model_call(
    env: WorkflowEnvironment, model: ScriptedModel
) -> None:
    model.reply(numbered_steps)
    workflow_id, run_id, spans = await traced_run(env, model, {})
    by_name: dict[str, list[ReadableSpan]] = {}
    for span in spans:
        by_name.setdefault(span.name, []).append(span)

    # Temporal's spans, once each although every workflow task replayed the history.
    assert len(by_name["StartWorkflow:PlanExecuteWorkflow"]) == 1
    assert len(by_name["RunWorkflow:PlanExecuteWorkflow"]) == 1
    assert len(by_name["StartActivity:request_model"]) == 5  # plan, 3 steps, final
    # One model span per call, inside its RunActivity span, in the order of the calls.
    chats = sorted(by_name["chat scripted"], key=lambda s: s.start_time or 0)
    assert len(chats) == len(model.calls) == 5
    runs = {s.context.span_id: s for s in by_name["RunActivity:request_model"]}
    for span, call in zip(chats, model.calls, strict=True):
        assert span.parent is not None and span.parent.span_id in runs
        attributes = dict(span.attributes or {})
        assert attributes == {
            "gen_ai.operation.name": "chat",
            "gen_ai.provider.name": "openai",
            "gen_ai.request.model": "scripted",
            "gen_ai.response.model": "scripted",
            "gen_ai.usage.input_tokens": len(call.text.split()),  # the scripted model's count
            "gen_ai.usage.output_tokens": attributes["gen_ai.usage.output_tokens"],
            "gen_ai.response.finish_reasons": ("stop",),
            "durafact.workflow_id": workflow_id,
            "durafact.run_id": run_id,
            "durafact.artifact_id": call.activity_id.removeprefix("llm:"),
            "durafact.attempt": 1,
        }
        assert attributes["gen_ai.usage.output_tokens"] > 0
    # No prompt or reply text in any span by default.
    shown = json.dumps([dict(s.attributes or {}) for s in spans], ensure_ascii=False, default=str)
    assert SYSTEM not in shown and "result of <" not in shown


async def test_with_trace_content_the_model_spans_hold_the_messages_and_the_reply(
    env: WorkflowEnvironment, model: ScriptedModel
) -> None:
    model.reply(numbered_steps)
    _, _, spans = await traced_run(env, model, {"DURAFACT_TRACE_CONTENT": "1"})
    step = next(
        s
        for s in spans
        if s.name == "chat scripted"
        and str((s.attributes or {})["durafact.artifact_id"]).startswith("step:")
    )
    attributes = step.attributes or {}
    sent = json.loads(str(attributes["gen_ai.input.messages"]))
    # The messages as the workflow sent them: the system prompt the planning call sent
    # whole goes by reference, the step's own request is text.
    assert sent[0]["role"] == "system" and sent[0]["content_from"].startswith("prompt:")
    assert sent[-1] == {"role": "user", "content": "Step 1: Pick dates"}
    [reply] = json.loads(str(attributes["gen_ai.output.messages"]))
    assert reply["role"] == "assistant" and reply["content"].startswith("result of <")


async def test_a_tool_call_has_a_span_named_after_the_tool_without_its_arguments(
    env: WorkflowEnvironment, model: ScriptedModel
) -> None:
    model.reply(turns(act("calculator", "17 * 23"), final("391")))
    question = ReActInput(question="What is 17 times 23?", tools=["calculator"])
    workflow_id, run_id, spans = await traced_run(env, model, {}, ReActWorkflow.run, question)

    [tool] = [s for s in spans if s.name.startswith("execute_tool")]
    assert tool.name == "execute_tool calculator"
    attributes = dict(tool.attributes or {})
    assert attributes["gen_ai.operation.name"] == "execute_tool"
    assert attributes["gen_ai.tool.name"] == "calculator"
    assert (attributes["durafact.workflow_id"], attributes["durafact.run_id"]) == (
        workflow_id,
        run_id,
    )
    assert "gen_ai.tool.call.arguments" not in attributes
    assert "17 * 23" not in json.dumps(attributes, default=str)


def test_tracing_is_off_without_otel_variables_and_a_bad_exporter_is_one_line() -> None:
    assert provider_from_env({}) is None
    assert provider_from_env({"OTEL_TRACES_EXPORTER": "none"}) is None
    assert provider_from_env({"OTEL_TRACES_EXPORTER": "console"}) is not None
    with pytest.raises(TracingConfigError) as refused:
        provider_from_env({"OTEL_TRACES_EXPORTER": "zipkin"})
    assert isinstance(refused.value, SettingsError)
    assert str(refused.value) == (
        "OTEL_TRACES_EXPORTER: 'zipkin' is not one durafact sets up (otlp, console, none); "
        "give DurafactPlugin tracing= your own provider"
    )
    assert otlp_url({}) == "http://localhost:4318/v1/traces"
    assert otlp_url({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://otel:4318/"}) == (
        "http://otel:4318/v1/traces"
    )
    assert otlp_url({"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://t/x"}) == "http://t/x"
