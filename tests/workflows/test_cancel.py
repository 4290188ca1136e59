"""Temporal's cancellation on a recipe: the run ends CANCELED with the status `canceled`,
its ledger intact and the reason recorded; the model call in flight is cancelled (the
scripted model sees its connection closed), and a child workflow is cancelled with its
parent."""

from __future__ import annotations

import asyncio
import uuid

import pytest
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client, WorkflowExecutionStatus, WorkflowFailureError
from temporalio.exceptions import CancelledError

from durafact._core.ids import CANCELLATION_ID
from durafact._recipes import Goal, PlanExecuteWorkflow
from durafact._recipes.recipe import CANCELED, STATUS_ATTRIBUTE, Cancellation
from durafact._runtime.settings import Settings
from durafact.testing import Call, ScriptedModel
from tests.helpers import ledger_of
from tests.workflows.test_plan_execute import GOAL, numbered_steps
from tests.workflows.test_plan_react import GOAL as PLAN_REACT_GOAL
from tests.workflows.test_plan_react import act, final, script, workflow_of
from tests.workflows.test_plan_react import start as start_plan_react

REASON = "the trip is off"


async def test_a_plan_cancelled_mid_step_ends_canceled_with_its_ledger_and_reason(
    client: Client, worker: Settings, model: ScriptedModel
) -> None:
    model.reply(numbered_steps)
    second_step = f"llm:step:{GOAL}:1"
    model.hold(lambda call: call.activity_id == second_step)
    handle = await client.start_workflow(
        PlanExecuteWorkflow.run,
        Goal(text=GOAL),
        id=f"plan-{uuid.uuid4().hex[:8]}",
        task_queue=worker.task_queue,
    )
    held: Call = await asyncio.to_thread(model.wait_for, lambda c: c.activity_id == second_step)

    await handle.cancel(reason=REASON)
    with pytest.raises(WorkflowFailureError) as ended:
        await handle.result()

    assert isinstance(ended.value.cause, CancelledError)
    described = await handle.describe()
    assert described.status == WorkflowExecutionStatus.CANCELED
    assert described.typed_search_attributes.get(STATUS_ATTRIBUTE) == CANCELED
    assert await handle.query(PlanExecuteWorkflow.status) == CANCELED
    # The ledger keeps what was done: step 1's result, no step 2, and why it stopped.
    ledger = await ledger_of(handle)
    assert f"result:step:{GOAL}:0" in ledger and f"result:step:{GOAL}:1" not in ledger
    assert ledger.get(CANCELLATION_ID).typed(Cancellation).data.reason == REASON
    page = await handle.query(PlanExecuteWorkflow.progress, 0)
    assert page.events[-1].message == f"canceled: {REASON}"
    # The model call in flight was cancelled: its activity hung up on the model (through
    # the heartbeat that carried the cancellation), and it was asked once.
    await asyncio.to_thread(model.wait_for, lambda c: c is held and c.hung_up)
    assert len(model.calls_for(second_step)) == 1
    history = await handle.fetch_history()
    kinds = [e.event_type for e in history.events]
    assert EventType.EVENT_TYPE_ACTIVITY_TASK_CANCEL_REQUESTED in kinds
    assert kinds[-1] == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_CANCELED


async def test_cancelling_a_plan_react_parent_cancels_its_running_child(
    client: Client, worker: Settings, model: ScriptedModel
) -> None:
    model.reply(script([act("3 * 12"), final("36")], [act("36 * 0.25"), final("9.00")]))
    handle = await start_plan_react(client, worker)
    first, second = (f"{handle.id}/step:{PLAN_REACT_GOAL}:{i}" for i in range(2))
    # The second step's agent is held at its first turn: its child workflow is running.
    model.hold(lambda c: c.activity_id.startswith("llm:react:") and workflow_of(c) == second)
    await asyncio.to_thread(model.wait_for, lambda c: workflow_of(c) == second)

    await handle.cancel(reason=REASON)
    with pytest.raises(WorkflowFailureError):
        await handle.result()

    child = client.get_workflow_handle(second)
    with pytest.raises(WorkflowFailureError) as child_ended:
        await child.result()
    assert isinstance(child_ended.value.cause, CancelledError)
    for run in (handle, child):
        described = await run.describe()
        assert described.status == WorkflowExecutionStatus.CANCELED
        assert described.typed_search_attributes.get(STATUS_ATTRIBUTE) == CANCELED
    # The first step's child had finished: it is left as it was.
    done = await client.get_workflow_handle(first).describe()
    assert done.status == WorkflowExecutionStatus.COMPLETED
