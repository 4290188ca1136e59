"""PlanExecuteWorkflow end to end on a real dev server with the scripted model."""

from __future__ import annotations

import asyncio
import uuid

import pytest
from pydantic import ValidationError
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client, WorkflowExecutionStatus, WorkflowFailureError

from durafact._core.ledger import ArtifactRef, Ledger
from durafact._core.llm import Usage
from durafact._core.plan_limits import MAX_STEPS
from durafact._recipes import (
    Goal,
    Plan,
    PlanExecuteResult,
    PlanExecuteWorkflow,
    PlanStep,
    StepResult,
)
from durafact._recipes.recipe import (
    COST_ATTRIBUTE,
    RECIPE_ATTRIBUTE,
    STATUS_ATTRIBUTE,
    TOKENS_ATTRIBUTE,
)
from durafact._runtime.settings import Settings
from durafact.testing import Call, ScriptedModel
from tests.helpers import ledger_of, run_to_ledger, scheduled_activities, stored_times

GOAL = "Plan a weekend in Kraków"


def numbered_steps(call: Call) -> str | dict:
    if call.schema_name == "Plan":
        return {"steps": ["Pick dates", "Book a hotel", "List sights"]}
    last = call.last_user.splitlines()[-1]
    return f"result of <{last}>"


async def run_plan(
    client: Client, settings: Settings, goal: str = GOAL, **kw
) -> tuple[PlanExecuteResult, Ledger]:
    return await run_to_ledger(
        client, PlanExecuteWorkflow.run, Goal(text=goal, **kw), task_queue=settings.task_queue
    )


async def test_steps_run_in_order_and_each_sees_the_earlier_results(
    client: Client, worker: Settings, model: ScriptedModel
) -> None:
    model.reply(numbered_steps)
    result, ledger = await run_plan(client, worker)

    steps = [ledger.resolve(ref, PlanStep) for ref in result.steps]
    results = [ledger.resolve(ref, StepResult) for ref in result.results]
    assert [s.description for s in steps] == ["Pick dates", "Book a hotel", "List sights"]
    assert [r.index for r in results] == [0, 1, 2]
    step_calls = model.calls_for("llm:step:")
    assert [c.activity_id for c in step_calls] == [
        f"llm:step:{GOAL}:0",
        f"llm:step:{GOAL}:1",
        f"llm:step:{GOAL}:2",
    ]
    # Step i was shown the results of steps 0..i-1 and nothing later.
    for i, call in enumerate(step_calls):
        for earlier in results[:i]:
            assert earlier.text in call.text
        for later in results[i:]:
            assert later.text not in call.text
    final_call = model.calls_for("llm:final:")[0]
    assert all(r.text in final_call.text for r in results)
    assert result.answer.text == "result of <Write the final answer.>"


async def test_final_answer_is_supported_by_every_step_result(
    client: Client, worker: Settings, model: ScriptedModel
) -> None:
    result, ledger = await run_plan(client, worker)
    final = f"final:{GOAL}"
    assert result.final == ArtifactRef(id=final, type="FinalAnswer", version=1)
    supported = {link.target for link in ledger.links_from(final, "supported_by")}
    assert supported == {ref.id for ref in result.results}
    assert supported == {f"result:step:{GOAL}:{i}" for i in range(3)}

    tree = ledger.provenance(result.final.id)
    ids = [node.id for node in tree.walk()]
    for i in range(3):
        assert f"step:{GOAL}:{i}" in ids
    assert f"goal:{GOAL}" in ids
    assert result.usage.total_tokens > 0


async def test_each_step_text_is_stored_in_history_once(
    client: Client, worker: Settings, model: ScriptedModel
) -> None:
    """The result names the steps and results instead of carrying them again: a result's
    text is in history once, as its model call's result (later calls get a reference)."""
    model.reply(numbered_steps)
    handle = await client.start_workflow(
        PlanExecuteWorkflow.run,
        Goal(text=GOAL),
        id=f"plan-{uuid.uuid4().hex[:8]}",
        task_queue=worker.task_queue,
    )
    result = await handle.result()
    ledger = await ledger_of(handle)
    history = await handle.fetch_history()
    for ref in result.results:
        assert stored_times(history, ledger.resolve(ref, StepResult).text) == 1, ref.id
    # What the user asked for is in the result too.
    assert stored_times(history, result.answer.text) == 2


async def test_a_thirty_step_plan_runs_every_step_in_order(
    client: Client, worker: Settings, model: ScriptedModel
) -> None:
    def thirty_steps(call: Call) -> str | dict:
        if call.schema_name == "Plan":
            return {"steps": [f"Do part {i + 1}" for i in range(30)]}
        return numbered_steps(call)

    model.reply(thirty_steps)
    result, ledger = await run_plan(client, worker, max_steps=30)

    assert len(result.steps) == len(result.results) == 30
    steps = [ledger.resolve(ref, PlanStep) for ref in result.steps]
    assert [s.description for s in steps] == [f"Do part {i + 1}" for i in range(30)]
    results = [ledger.resolve(ref, StepResult) for ref in result.results]
    assert [r.index for r in results] == list(range(30))
    last = model.calls_for(f"llm:step:{GOAL}:29")[0]
    assert all(r.text in last.text for r in results[:29])
    final = model.calls_for("llm:final:")[0]
    assert all(r.text in final.text for r in results)


def test_max_steps_is_bounded_by_max_steps_and_plans_may_be_that_long() -> None:
    assert Goal(text=GOAL).max_steps == 3
    assert Goal(text=GOAL, max_steps=MAX_STEPS).max_steps == MAX_STEPS
    with pytest.raises(ValidationError, match="less than or equal to 100"):
        Goal(text=GOAL, max_steps=MAX_STEPS + 1)
    assert len(Plan(steps=["a step"] * MAX_STEPS).steps) == MAX_STEPS


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
    assert running.get(STATUS_ATTRIBUTE) == "executing"  # the phase; the step is in `status`

    # The usage: the query's is now's (the plan and step 1), the attribute's is as of the
    # phase `executing` (the plan). The worker has no prices: the cost is unknown, and
    # DurafactCost stays unset rather than 0.
    so_far = await handle.query("usage", result_type=Usage)
    assert 0 < running.get(TOKENS_ATTRIBUTE) < so_far.total_tokens
    assert so_far.cost is None and running.get(COST_ATTRIBUTE) is None

    release.set()
    result = await handle.result()
    tail = await handle.query(PlanExecuteWorkflow.progress, page.next_offset)
    assert [e.message for e in tail.events][-1] == "completed"
    # One upsert per phase, the recipe's name with the first, the tokens with each and the
    # cost when it changed (0, then unknown after the unpriced plan): not one per step or
    # per model call.
    history = await handle.fetch_history()
    upserts = [
        dict(e.upsert_workflow_search_attributes_event_attributes.search_attributes.indexed_fields)
        for e in history.events
        if e.event_type == EventType.EVENT_TYPE_UPSERT_WORKFLOW_SEARCH_ATTRIBUTES
    ]
    usage = ["DurafactCost", "DurafactTokens"]
    assert [sorted(u) for u in upserts] == [
        sorted(["DurafactRecipe", "DurafactStatus", *usage]),
        sorted(["DurafactStatus", *usage]),
        ["DurafactStatus", "DurafactTokens"],
        ["DurafactStatus", "DurafactTokens"],
    ]
    attributes = (await handle.describe()).typed_search_attributes
    assert attributes.get(RECIPE_ATTRIBUTE) == "plan_execute"
    assert attributes.get(STATUS_ATTRIBUTE) == "completed"
    assert attributes.get(TOKENS_ATTRIBUTE) == result.usage.total_tokens > so_far.total_tokens


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
