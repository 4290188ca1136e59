"""A model activity running in the worker process that scheduled it takes its context
from memory (durafact/_runtime/handoff.py); anywhere else it asks its workflow by query. The
model is shown the same messages either way."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from temporalio.client import (
    Client,
    Interceptor,
    OutboundInterceptor,
    QueryWorkflowInput,
)

from durafact._core.llm import ResolvedContext
from durafact._recipes import Goal, PlanExecuteWorkflow, ReActInput, ReActWorkflow
from durafact._runtime import handoff
from durafact._runtime.settings import Settings
from durafact._runtime.worker import build_worker
from durafact.testing import Call, ScriptedModel, ToolCalls


class CountQueries(Interceptor):
    """Records the name of every query the client it is installed on sends."""

    def __init__(self) -> None:
        self.names: list[str] = []

    def intercept_client(self, next: OutboundInterceptor) -> OutboundInterceptor:
        return _Counting(next, self.names)


class _Counting(OutboundInterceptor):
    def __init__(self, next: OutboundInterceptor, names: list[str]) -> None:
        super().__init__(next)
        self._names = names

    async def query_workflow(self, input: QueryWorkflowInput) -> Any:
        self._names.append(input.query)
        return await super().query_workflow(input)


def plan_and_tools(call: Call) -> str | dict | ToolCalls:
    if call.schema_name == "Plan":
        return {"steps": ["Pick dates", "Book a hotel", "List sights"]}
    if call.tool_names and sum(m.get("role") == "tool" for m in call.messages) < 2:
        return ToolCalls([("calculator", {"expression": "6*7"})])
    return f"result of <{call.last_user.splitlines()[-1]}>"


async def run_both(client: Client, settings: Settings) -> list[str]:
    """A 3-step plan and a native tool loop of two calls on a worker whose activities
    send their queries through a counter; the names of the queries they sent."""
    counter = CountQueries()
    counted = Client(
        client.service_client,
        namespace=client.namespace,
        data_converter=client.data_converter,
        interceptors=[counter],
    )
    queue = f"handoff-{uuid.uuid4().hex[:8]}"
    async with build_worker(counted, settings.model_copy(update={"task_queue": queue})):
        await client.execute_workflow(
            PlanExecuteWorkflow.run,
            Goal(text="Plan a weekend in Kraków"),
            id=f"plan-{uuid.uuid4().hex[:8]}",
            task_queue=queue,
        )
        await client.execute_workflow(
            ReActWorkflow.run,
            ReActInput(question="What is 6*7?", tools=["calculator"], protocol="native"),
            id=f"react-{uuid.uuid4().hex[:8]}",
            task_queue=queue,
        )
    return counter.names


async def test_in_the_scheduling_process_context_comes_from_memory_and_matches_the_query(
    client: Client, settings: Settings, model: ScriptedModel, monkeypatch: pytest.MonkeyPatch
) -> None:
    model.reply(plan_and_tools)
    assert await run_both(client, settings) == []
    from_memory = [c.messages for c in model.calls]

    model.reset()
    model.reply(plan_and_tools)
    monkeypatch.setattr(handoff, "MAX_CHARS", -1)  # nothing is handed over: every call asks
    queries = await run_both(client, settings)
    # A query per message that names texts: step 1 names the system prompt the plan call
    # sent, steps 2 and 3 and the final answer that and the earlier results; the loop's
    # model calls name the conversation, the second and third also the system prompt.
    assert (
        queries
        == ["context_texts"] * 7
        + ["context_messages"]
        + [
            "context_texts",
            "context_messages",
        ]
        * 2
    )
    assert [c.messages for c in model.calls] == from_memory
    assert "result of <Step 1: Pick dates>" in model.calls[2].text


def test_entries_are_taken_once_and_the_oldest_go_first() -> None:
    store = handoff.Handoff(max_entries=2)
    context = ResolvedContext(texts=(), turns=None)
    for n in range(3):
        store.put("run", f"a{n}", context)
    assert store.take("run", "a0") is None  # pushed out by the third
    assert store.take("run", "a2") is context
    assert store.take("run", "a2") is None
    assert store.take("run", "a1") is context
