"""PlanExecuteWorkflow end to end on a real dev server with the scripted model."""

from __future__ import annotations

import asyncio
import uuid

import pytest
from temporalio.client import Client, WorkflowExecutionStatus, WorkflowFailureError

from cli.settings import Settings
from tests.helpers import scheduled_activities
from tests.scripted_model import Call, ScriptedModel
from workflows import Goal, PlanExecuteResult, PlanExecuteWorkflow
from workflows.recipe import RECIPE_ATTRIBUTE, STATUS_ATTRIBUTE

GOAL = "Plan a weekend in Kraków"


def numbered_steps(call: Call) -> str | dict:
    if call.schema_name == "Plan":
        return {"steps": ["Pick dates", "Book a hotel", "List sights"]}
    last = call.last_user.splitlines()[-1]
    return f"result of <{last}>"


async def run_plan(client: Client, settings: Settings, goal: str = GOAL, **kw) -> PlanExecuteResult:
    return await client.execute_workflow(
        PlanExecuteWorkflow.run,
        Goal(text=goal, **kw),
        id=f"plan-{uuid.uuid4().hex[:8]}",
        task_queue=settings.task_queue,
    )


async def test_steps_run_in_order_and_each_sees_the_earlier_results(
    client: Client, worker: Settings, model: ScriptedModel
) -> None:
    model.reply(numbered_steps)
    result = await run_plan(client, worker)

    assert [s.description for s in result.steps] == ["Pick dates", "Book a hotel", "List sights"]
    assert [r.index for r in result.results] == [0, 1, 2]
    step_calls = model.calls_for("llm:step:")
    assert [c.activity_id for c in step_calls] == [
        f"llm:step:{GOAL}:0",
        f"llm:step:{GOAL}:1",
        f"llm:step:{GOAL}:2",
    ]
    # Step i was shown the results of steps 0..i-1 and nothing later.
    for i, call in enumerate(step_calls):
        for earlier in result.results[:i]:
            assert earlier.text in call.text
        for later in result.results[i:]:
            assert later.text not in call.text
    final_call = model.calls_for("llm:final:")[0]
    assert all(r.text in final_call.text for r in result.results)
    assert result.answer.text == "result of <Write the final answer.>"


async def test_final_answer_is_supported_by_every_step_result(
    client: Client, worker: Settings, model: ScriptedModel
) -> None:
    result = await run_plan(client, worker)
    ledger = result.ledger
    final = f"final:{GOAL}"
    supported = {link.target for link in ledger.links_from(final, "supported_by")}
    assert supported == {f"result:step:{GOAL}:{i}" for i in range(3)}

    tree = ledger.provenance(final)
    ids = [node.id for node in tree.walk()]
    for i in range(3):
        assert f"step:{GOAL}:{i}" in ids
    assert f"goal:{GOAL}" in ids
    assert result.usage.total_tokens > 0


async def test_history_shows_readable_activity_summaries(
    client: Client, worker: Settings, model: ScriptedModel
) -> None:
    handle = await client.start_workflow(
        PlanExecuteWorkflow.run,
        Goal(text=GOAL),
        id=f"plan-{uuid.uuid4().hex[:8]}",
        task_queue=worker.task_queue,
    )
    await handle.result()
    scheduled = await scheduled_activities(client, handle)
    summaries = [s.summary for s in scheduled]
    assert summaries == [
        f"request model: plan steps for {GOAL!r}",
        "request model: step 1 'Gather facts'",
        "request model: step 2 'Compare options'",
        "request model: step 3 'Decide'",
        f"request model: final answer for {GOAL!r}",
    ]
    activity_ids = [s.activity_id for s in scheduled]
    assert activity_ids[0] == f"llm:plan:{GOAL}"
    assert activity_ids[-1] == f"llm:final:{GOAL}"


async def test_queries_and_search_attributes_follow_the_run(
    client: Client, worker: Settings, model: ScriptedModel
) -> None:
    release = model.hold(lambda call: call.activity_id == f"llm:step:{GOAL}:1")
    handle = await client.start_workflow(
        PlanExecuteWorkflow.run,
        Goal(text=GOAL),
        id=f"plan-{uuid.uuid4().hex[:8]}",
        task_queue=worker.task_queue,
    )
    await asyncio.to_thread(model.wait_for, lambda call: call.activity_id.endswith(":1"))
    # Mid-run: the queries show where the workflow is, and what it has made so far.
    assert await handle.query(PlanExecuteWorkflow.status) == "executing:2/3"
    ledger = await handle.query(PlanExecuteWorkflow.artifacts)
    assert f"result:step:{GOAL}:0" in ledger and f"result:step:{GOAL}:1" not in ledger
    page = await handle.query(PlanExecuteWorkflow.progress, 0)
    messages = [e.message for e in page.events]
    assert messages[:3] == [f"planning: {GOAL}", "planned 3 steps", "step 1/3"]
    assert page.next_offset == len(page.events)
    later = await handle.query(PlanExecuteWorkflow.progress, page.next_offset)
    assert later.events == []
    running = (await handle.describe()).typed_search_attributes
    assert running.get(STATUS_ATTRIBUTE) == "executing:2/3"

    release.set()
    await handle.result()
    tail = await handle.query(PlanExecuteWorkflow.progress, page.next_offset)
    assert [e.message for e in tail.events][-1] == "completed"
    attributes = (await handle.describe()).typed_search_attributes
    assert attributes.get(RECIPE_ATTRIBUTE) == "plan_execute"
    assert attributes.get(STATUS_ATTRIBUTE) == "completed"


async def test_a_failed_run_is_visible_as_failed(
    client: Client, worker: Settings, model: ScriptedModel
) -> None:
    model.fail(403, when=lambda call: call.activity_id.startswith("llm:step:"))
    handle = await client.start_workflow(
        PlanExecuteWorkflow.run,
        Goal(text=GOAL),
        id=f"plan-{uuid.uuid4().hex[:8]}",
        task_queue=worker.task_queue,
    )
    with pytest.raises(WorkflowFailureError):
        await handle.result()
    description = await handle.describe()
    assert description.status == WorkflowExecutionStatus.FAILED
    assert description.typed_search_attributes.get(STATUS_ATTRIBUTE) == "failed"
