"""PlanReActWorkflow end to end on a real dev server: the scripted model plans, plays
each step's ReAct agent (told apart by the child workflow id it is called from) and
writes the final answer; the worker runs the real calculator."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Sequence
from datetime import timedelta
from typing import Any
from urllib.parse import unquote

from temporalio.api.enums.v1 import EventType
from temporalio.client import Client, WorkflowExecutionStatus, WorkflowHandle

from durafact._core.ids import react_run
from durafact._core.ledger import Ledger
from durafact._recipes import (
    AgentStepResult,
    PlanReActInput,
    PlanReActResult,
    PlanReActWorkflow,
    ReActResult,
)
from durafact._recipes.recipe import MODEL_DEADLINE_MEMO, STATUS_ATTRIBUTE
from durafact._runtime.settings import Settings
from durafact.testing import Call, ScriptedModel
from tests.helpers import ledger_of

GOAL = "Price three boxes of twelve eggs at 0.25 each"
STEPS = ["Count the eggs in three boxes of twelve", "Price those eggs at 0.25 each"]


def act(expression: str) -> str:
    return f"Thought: compute it.\nAction: calculator\nAction Input: {expression}\nPAUSE"


def final(answer: str) -> str:
    return f"Thought: I now know the answer.\nFinal Answer: {answer}"


def workflow_of(call: Call) -> str:
    return unquote(call.headers.get("x-durafact-workflow-id", ""))


def script(*agents: Sequence[str]) -> Callable[[Call], str | dict]:
    """Plans STEPS; the agent of step i answers its turn n with `agents[i][n - 1]` (the
    last one for every later turn); anything else is the final answer."""

    def reply(call: Call) -> str | dict:
        if call.schema_name == "Plan":
            return {"steps": STEPS}
        if call.activity_id.startswith("llm:react:"):
            replies = agents[int(workflow_of(call).rsplit(":", 1)[-1])]
            turn = int(call.activity_id.rsplit(":", 1)[-1])
            return replies[min(turn, len(replies)) - 1]
        return "Three boxes hold 36 eggs; they cost 9.00."

    return reply


def step_results(result: PlanReActResult, ledger: Ledger) -> list[AgentStepResult]:
    return [ledger.resolve(ref, AgentStepResult) for ref in result.results]


async def start(client: Client, settings: Settings, **kw: Any) -> WorkflowHandle:
    return await client.start_workflow(
        PlanReActWorkflow.run,
        PlanReActInput(text=GOAL, **kw),
        id=f"plan-react-{uuid.uuid4().hex[:8]}",
        task_queue=settings.task_queue,
    )


async def test_each_step_runs_a_react_child_and_provenance_reaches_its_tool_calls(
    client: Client, worker: Settings, model: ScriptedModel
) -> None:
    model.reply(script([act("3 * 12"), final("36")], [act("36 * 0.25"), final("9.00")]))
    handle = await start(client, worker)
    result: PlanReActResult = await handle.result()
    ledger = await ledger_of(handle)
    results = step_results(result, ledger)

    children = [f"{handle.id}/step:{GOAL}:{i}" for i in range(2)]
    assert [(r.child_id, r.ending, r.text) for r in results] == [
        (children[0], "answer", "36"),
        (children[1], "answer", "9.00"),
    ]
    # Each step is a real ReActWorkflow child of this run, and its calculator really ran.
    child_results: list[ReActResult] = []
    for child_id in children:
        child = client.get_workflow_handle(child_id, result_type=ReActResult)
        described = await child.describe()
        assert described.workflow_type == "ReActWorkflow"
        assert described.status == WorkflowExecutionStatus.COMPLETED
        assert described.parent_id == handle.id
        child_results.append(await child.result())
    assert [[c.ok for c in r.tool_calls] for r in results] == [[True], [True]]
    shown = [c.last_user for c in model.calls_for("llm:react:") if "Observation" in c.last_user]
    assert shown == ["Observation: 36", "Observation: 9"]

    # The agent of step 2 got its step, the goal and what step 1 found; the parent's
    # settings (the text protocol) reached it.
    step2_first = next(
        c
        for c in model.calls_for("llm:react:")
        if workflow_of(c) == children[1] and c.activity_id.endswith(":1")
    )
    assert step2_first.last_user.startswith(f"Question: {STEPS[1]}")
    assert GOAL in step2_first.last_user and "1. 36" in step2_first.last_user
    assert step2_first.body["stop"] == ["Observation:"]

    # final -> results -> the children's answers -> their tool calls.
    assert result.final.id == f"final:{GOAL}"
    ids = [node.id for node in ledger.provenance(result.final.id).walk()]
    for i, child in enumerate(child_results):
        step = f"step:{GOAL}:{i}"
        answer = f"child:{step}:answer:{react_run(child.question)}"
        call = f"child:{step}:{child.tool_calls[0].id}"
        assert [link.target for link in ledger.links_from(f"result:{step}", "supported_by")] == [
            answer
        ]
        assert [link.target for link in ledger.links_from(answer, "based_on")] == [call]
        assert ids.index(f"result:{step}") < ids.index(answer) < ids.index(call)
    # The final answer was written from the results, by reference.
    (final_call,) = model.calls_for("llm:final:")
    assert "36" in final_call.text and "9.00" in final_call.text
    assert result.answer.text == "Three boxes hold 36 eggs; they cost 9.00."
    assert result.usage.total_tokens > sum(r.usage.total_tokens for r in child_results)
    assert (await handle.describe()).typed_search_attributes.get(STATUS_ATTRIBUTE) == "completed"


async def test_a_child_that_runs_out_of_turns_gives_a_result_that_says_so(
    client: Client, worker: Settings, model: ScriptedModel
) -> None:
    model.reply(script([act("1 + 1"), act("2 + 1")], [final("9.00")]))
    handle = await start(client, worker, max_turns=2)
    result: PlanReActResult = await handle.result()
    ledger = await ledger_of(handle)

    first, second = step_results(result, ledger)
    assert (first.ending, first.turns, first.answer_id) == ("turn_limit", 2, None)
    assert first.text == "No answer: the agent used all its 2 turns without finding one."
    assert (second.ending, second.text) == ("answer", "9.00")
    child = client.get_workflow_handle(first.child_id)
    assert (await child.describe()).typed_search_attributes.get(STATUS_ATTRIBUTE) == "turn_limit"
    # Without an answer, the result rests on the calls the agent made.
    step = f"step:{GOAL}:0"
    assert [link.target for link in ledger.links_from(f"result:{step}", "based_on")] == [
        f"child:{step}:{c.id}" for c in first.tool_calls
    ]
    assert len(first.tool_calls) == 2
    # The plan went on, and the final answer heard that step 1 found nothing.
    (final_call,) = model.calls_for("llm:final:")
    assert first.text in final_call.text
    assert (await handle.describe()).typed_search_attributes.get(STATUS_ATTRIBUTE) == "completed"


async def test_a_looping_child_gives_a_result_that_says_so(
    client: Client, worker: Settings, model: ScriptedModel
) -> None:
    model.reply(script([act('{"expression": "2 +"}')], [final("9.00")]))
    handle = await start(client, worker, loop_limit=2)
    first, second = step_results(await handle.result(), await ledger_of(handle))
    assert (first.ending, first.turns, [c.ok for c in first.tool_calls]) == (
        "looping",
        2,
        [False, False],
    )
    assert first.text == (
        "No answer: the agent repeated the same failing tool call and was stopped after 2 turns."
    )
    assert second.ending == "answer"


async def test_the_model_deadline_a_run_was_started_with_bounds_its_childrens_calls_too(
    client: Client, worker: Settings, model: ScriptedModel
) -> None:
    model.reply(script([act("3 * 12"), final("36")], [final("9.00")]))
    handle = await client.start_workflow(
        PlanReActWorkflow.run,
        PlanReActInput(text=GOAL),
        id=f"plan-react-{uuid.uuid4().hex[:8]}",
        task_queue=worker.task_queue,
        memo={MODEL_DEADLINE_MEMO: 600},
    )
    await handle.result()

    child = client.get_workflow_handle(f"{handle.id}/step:{GOAL}:0")
    assert await (await child.describe()).memo_value(MODEL_DEADLINE_MEMO) == 600
    scheduled = {
        e.activity_task_scheduled_event_attributes.activity_type.name: (
            e.activity_task_scheduled_event_attributes.schedule_to_close_timeout.ToTimedelta()
        )
        for run in (handle, child)
        for e in (await run.fetch_history()).events
        if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED
    }
    # (The child lists its Python tools by a local activity, whose deadline history does
    # not record.)
    assert scheduled == {
        "request_model": timedelta(minutes=10),
        "call_tool": timedelta(minutes=10),
    }
