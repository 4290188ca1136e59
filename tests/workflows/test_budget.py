"""Budgets end to end on a real dev server (durafact/_recipes/spending.py): a ReAct loop stopped
at its limit, a PlanReAct parent whose children draw from its budget, a worker killed
mid-call, a budget that asks a person, a chat. The scripted model counts words as
tokens, and every count here is read back from history: what the runs recorded."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from datetime import timedelta
from typing import Any
from urllib.parse import unquote

import pytest
from temporalio.api.enums.v1 import EventType
from temporalio.client import (
    Client,
    WorkflowExecutionStatus,
    WorkflowFailureError,
    WorkflowHandle,
    WorkflowUpdateFailedError,
)
from temporalio.exceptions import ActivityError, ApplicationError, ChildWorkflowError

from durafact._core.approval import ApprovalAnswer, ApprovalOutcome
from durafact._core.budget import Budget, Spent
from durafact._core.llm import LLMResponse, Usage
from durafact._recipes import (
    ChatInput,
    ChatReply,
    ChatSend,
    ChatWorkflow,
    PlanReActInput,
    PlanReActResult,
    PlanReActWorkflow,
    ReActInput,
    ReActResult,
    ReActWorkflow,
)
from durafact._recipes.recipe import STATUS_ATTRIBUTE
from durafact._recipes.spending import OVER_BUDGET, OVER_BUDGET_ERROR
from durafact._runtime.settings import Settings
from durafact.testing import Call, ScriptedModel
from tests.helpers import ledger_of, question_waiting, result_despite_worker_crash

LOOP = 30  # turns a loop would run without a budget
BUDGET = 3000  # tokens: about a third of those turns


def act(expression: str) -> str:
    return f"Thought: compute it.\nAction: calculator\nAction Input: {expression}\nPAUSE"


def final(answer: str) -> str:
    return f"Thought: I now know the answer.\nFinal Answer: {answer}"


def turn_of(call: Call) -> int:
    return int(call.activity_id.rsplit(":", 1)[-1])


def busy(call: Call) -> str:
    """An agent that never answers: a new calculation every turn."""
    return act(f"{turn_of(call)} * 7")


def busy_until(turn: int) -> Callable[[Call], str]:
    """An agent that answers at `turn`."""
    return lambda call: final("42") if turn_of(call) >= turn else busy(call)


async def model_usages(client: Client, handle: WorkflowHandle[Any, Any]) -> list[Usage]:
    """The usage of every model call the run recorded, in order: its `request_model`
    activities' results in history (a retried attempt records nothing)."""
    history = await handle.fetch_history()
    model_calls = {
        e.event_id
        for e in history.events
        if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED
        and e.activity_task_scheduled_event_attributes.activity_type.name == "request_model"
    }
    converter = client.data_converter
    usages = []
    for e in history.events:
        done = e.activity_task_completed_event_attributes
        if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_COMPLETED and (
            done.scheduled_event_id in model_calls
        ):
            [response] = await converter.decode(done.result.payloads, [LLMResponse])
            usages.append(response.usage)
    return usages


async def input_of(client: Client, handle: WorkflowHandle[Any, Any], kind: type) -> Any:
    """The input the run was started with, from its first event."""
    started = (await handle.fetch_history()).events[0].workflow_execution_started_event_attributes
    [value] = await client.data_converter.decode(started.input.payloads, [kind])
    return value


def total(usages: list[Usage]) -> Usage:
    return sum(usages, Usage())


async def over_budget(handle: WorkflowHandle[Any, Any]) -> tuple[ApplicationError, Spent]:
    """The run's failure, which must be its budget's stop, and what it says was spent."""
    with pytest.raises(WorkflowFailureError) as failed:
        await handle.result()
    stop = failed.value.cause
    assert isinstance(stop, ApplicationError), failed.value
    assert (stop.type, stop.non_retryable) == (OVER_BUDGET_ERROR, True)
    spent = Spent.among(stop.details)
    assert spent is not None
    return stop, spent


async def phase(handle: WorkflowHandle[Any, Any]) -> str | None:
    description = await handle.describe()
    return description.typed_search_attributes.get(STATUS_ATTRIBUTE)


async def start_react(client: Client, task_queue: str, **settings: Any) -> WorkflowHandle:
    return await client.start_workflow(
        ReActWorkflow.run,
        ReActInput(question="What is 7 times each number?", **settings),
        id=f"react-{uuid.uuid4().hex[:8]}",
        task_queue=task_queue,
    )


# --- fail --------------------------------------------------------------------------------


async def test_a_budget_stops_a_thirty_turn_loop_at_its_limit_with_the_spent_tokens_exact(
    client: Client, worker: Settings, model: ScriptedModel
) -> None:
    model.reply(busy)
    handle = await start_react(
        client, worker.task_queue, max_turns=LOOP, budget=Budget(tokens=BUDGET)
    )
    stop, spent = await over_budget(handle)

    usages = await model_usages(client, handle)
    calls = model.calls_for("llm:react:")
    # Stopped before the first call that would start with the budget spent: the calls
    # made went over it, the ones before the last did not.
    assert 1 < len(usages) == len(calls) < LOOP
    assert total(usages[:-1]).total_tokens < BUDGET <= total(usages).total_tokens
    # What the failure says was spent is what the calls recorded, and what the model
    # served: prompt and reply words, counted once per call.
    assert spent.usage == total(usages)
    served = sum(len(c.text.split()) + len(busy(c).split()) for c in calls)
    assert spent.usage.total_tokens == served
    assert stop.message == f"over budget: spent {served:,} of {BUDGET:,} tokens"
    # Not a crash: the status says why, and what the run made is all there.
    assert await handle.query("status", result_type=str) == OVER_BUDGET
    assert await phase(handle) == OVER_BUDGET
    ledger = await ledger_of(handle)
    observations = [a for a in ledger.artifacts if a.startswith("obs:")]
    assert len(observations) == len(calls)


# --- children ----------------------------------------------------------------------------

STEPS = ["Count the eggs in three boxes of twelve", "Price those eggs at 0.25 each"]


def workflow_of(call: Call) -> str:
    return unquote(call.headers.get("x-durafact-workflow-id", ""))


def plan_script(*agents: Callable[[Call], str]) -> Callable[[Call], str | dict]:
    """Plans STEPS; step i's agent is `agents[i]`; anything else writes the final answer."""

    def reply(call: Call) -> str | dict:
        if call.schema_name == "Plan":
            return {"steps": STEPS}
        if call.activity_id.startswith("llm:react:"):
            return agents[int(workflow_of(call).rsplit(":", 1)[-1])](call)
        return "Three boxes hold 36 eggs; they cost 9.00."

    return reply


async def test_children_that_together_exceed_the_parents_budget_stop_it_and_add_up(
    client: Client, worker: Settings, model: ScriptedModel
) -> None:
    model.reply(plan_script(busy_until(2), busy))
    goal = "Price three boxes of twelve eggs at 0.25 each"
    handle = await client.start_workflow(
        PlanReActWorkflow.run,
        PlanReActInput(text=goal, max_turns=LOOP, budget=Budget(tokens=BUDGET)),
        id=f"plan-react-{uuid.uuid4().hex[:8]}",
        task_queue=worker.task_queue,
    )
    stop, spent = await over_budget(handle)

    first = client.get_workflow_handle(f"{handle.id}/step:{goal}:0", result_type=ReActResult)
    second = client.get_workflow_handle(f"{handle.id}/step:{goal}:1")
    answered = await first.result()
    assert answered.answer == "42"
    child_stop, child_spent = await over_budget(second)
    assert await phase(second) == OVER_BUDGET and await phase(handle) == OVER_BUDGET
    # The parent's usage is its own call (the plan) and each child's, counted once:
    # the first from its result, the second from its failure.
    [plan] = await model_usages(client, handle)
    assert answered.usage == total(await model_usages(client, first))
    assert child_spent.usage == total(await model_usages(client, second))
    assert spent.usage == plan + answered.usage + child_spent.usage
    # Each child drew what was left: the second got the budget less the plan and step 1.
    left = BUDGET - plan.total_tokens - answered.usage.total_tokens
    assert (await input_of(client, second, ReActInput)).budget == Budget(tokens=left)
    assert child_stop.message.startswith(f"over budget: spent {child_spent.usage.total_tokens:,}")
    assert child_stop.message.endswith(f" of {left:,} tokens")
    assert stop.message.startswith(f"over budget: spent {spent.usage.total_tokens:,} of 3,000")
    assert f"child {second.id} stopped" in stop.message
    assert not [c for c in model.calls if c.activity_id == "llm:final"]  # no finish


async def test_a_child_that_fails_reports_what_it_spent_under_its_own_error(
    client: Client, worker: Settings, model: ScriptedModel
) -> None:
    model.reply(plan_script(busy_until(2), busy))
    model.fail(401, when=lambda call: workflow_of(call).endswith(":1") and turn_of(call) == 3)
    goal = "Price three boxes of twelve eggs at 0.25 each"
    handle = await client.start_workflow(
        PlanReActWorkflow.run,
        PlanReActInput(text=goal, max_turns=LOOP, budget=Budget(tokens=50_000)),
        id=f"plan-react-{uuid.uuid4().hex[:8]}",
        task_queue=worker.task_queue,
    )
    with pytest.raises(WorkflowFailureError) as failed:
        await handle.result()
    # The parent's failure reads as before (the child's, then the model's refusal), and
    # the child's own error carries what its two recorded calls spent.
    assert isinstance(failed.value.cause, ChildWorkflowError)
    report = failed.value.cause.cause
    assert isinstance(report, ApplicationError) and report.type == "AuthenticationFailed"
    assert isinstance(report.cause, ActivityError)
    second = client.get_workflow_handle(f"{handle.id}/step:{goal}:1")
    spent = Spent.among(report.details)
    recorded = await model_usages(client, second)
    assert spent is not None and len(recorded) == 2 and spent.usage == total(recorded)
    assert await phase(second) == "failed"


async def test_a_worker_killed_mid_call_does_not_count_the_call_twice(
    client: Client, settings: Settings, model: ScriptedModel
) -> None:
    model.reply(plan_script(busy_until(3), busy_until(2)))
    goal = "Price three boxes of twelve eggs at 0.25 each"
    workflow_id = f"plan-react-{uuid.uuid4().hex[:8]}"

    def second_turn_of_step_one(call: Call) -> bool:
        return call.activity_id.endswith(":2") and workflow_of(call).endswith(":0")

    async def start() -> WorkflowHandle:
        return await client.start_workflow(
            PlanReActWorkflow.run,
            PlanReActInput(text=goal, max_turns=LOOP, budget=Budget(tokens=50_000)),
            id=workflow_id,
            task_queue=settings.task_queue,
        )

    result: PlanReActResult = await result_despite_worker_crash(
        client, settings, model, start=start, during=second_turn_of_step_one
    )
    handle = client.get_workflow_handle(workflow_id)
    children = [client.get_workflow_handle(f"{workflow_id}/step:{goal}:{i}") for i in (0, 1)]
    recorded = [u for h in (handle, *children) for u in await model_usages(client, h)]
    # The killed attempt reached the model, but only its retry's answer is recorded.
    retried = [c for c in model.calls if second_turn_of_step_one(c)]
    assert [c.attempt for c in retried] == [1, 2]
    assert len(model.calls) == len(recorded) + 1
    assert result.usage == total(recorded)


# --- ask ---------------------------------------------------------------------------------


async def test_ask_approved_with_a_new_limit_completes_the_run(
    client: Client, worker: Settings, model: ScriptedModel
) -> None:
    model.reply(busy_until(6))
    handle = await start_react(
        client, worker.task_queue, max_turns=LOOP, budget=Budget(tokens=900, on_exhausted="ask")
    )
    question = await question_waiting(handle)
    spent = total(await model_usages(client, handle))
    assert question.id == "approval:budget:1" and question.settable == ["tokens"]
    assert question.text == (f"spent {spent.total_tokens:,} of 900 tokens; extend by 900 tokens?")
    assert await handle.query("status", result_type=str) == "awaiting_approval"
    # A limit that leaves nothing for the next call is refused before history.
    with pytest.raises(WorkflowUpdateFailedError) as refused:
        await handle.execute_update(
            "decide",
            ApprovalAnswer(question_id=question.id, approved=True, changes={"tokens": "10"}),
            result_type=ApprovalOutcome,
        )
    assert "tokens=10 leaves nothing for the next call" in str(refused.value.cause)

    outcome = await handle.execute_update(
        "decide",
        ApprovalAnswer(question_id=question.id, approved=True, changes={"tokens": "50000"}),
        result_type=ApprovalOutcome,
    )
    assert outcome.changes == {"tokens": "50000"}
    result: ReActResult = await handle.result()
    assert (result.ending, result.answer, result.turns) == ("answer", "42", 6)
    assert result.usage == total(await model_usages(client, handle))
    assert 900 < result.usage.total_tokens < 50_000
    assert await phase(handle) == "completed"


async def test_ask_extends_by_the_first_limit_and_a_rejection_ends_it_over_budget(
    client: Client, worker: Settings, model: ScriptedModel
) -> None:
    model.reply(busy)
    handle = await start_react(
        client, worker.task_queue, max_turns=LOOP, budget=Budget(tokens=900, on_exhausted="ask")
    )
    first = await question_waiting(handle)
    await handle.signal("answer", ApprovalAnswer(question_id=first.id, approved=True))
    second = await question_waiting(handle, n=2)
    spent = total(await model_usages(client, handle)).total_tokens
    assert spent >= 900 and second.text == f"spent {spent:,} of 1,800 tokens; extend by 900 tokens?"
    await handle.signal(
        "answer", ApprovalAnswer(question_id=second.id, approved=False, reason="enough")
    )
    stop, spent_at_stop = await over_budget(handle)
    assert stop.message == (
        f"over budget: spent {spent:,} of 1,800 tokens (approval:budget:2 rejected: enough)"
    )
    assert spent_at_stop.usage.total_tokens == spent
    assert await phase(handle) == OVER_BUDGET


async def test_ask_unanswered_until_its_timeout_ends_it_over_budget(
    client: Client, worker: Settings, model: ScriptedModel
) -> None:
    model.reply(busy)
    budget = Budget(tokens=900, on_exhausted="ask", ask_timeout=timedelta(seconds=2))
    handle = await start_react(client, worker.task_queue, max_turns=LOOP, budget=budget)
    stop, _ = await over_budget(handle)
    assert stop.message.endswith("(approval:budget:1 timed out)")


# --- chat --------------------------------------------------------------------------------


async def test_a_chat_over_its_budget_answers_the_waiting_message_and_ends(
    client: Client, worker: Settings, model: ScriptedModel
) -> None:
    model.reply(lambda call: "a short reply of six words")
    handle = await client.start_workflow(
        ChatWorkflow.run,
        ChatInput(stream=False, budget=Budget(tokens=10)),
        id=f"chat-{uuid.uuid4().hex[:8]}",
        task_queue=worker.task_queue,
    )
    # The first call may start (nothing is spent), and alone spends more than 10 tokens.
    first = await handle.execute_update(
        ChatWorkflow.send, ChatSend(text="Hello there"), result_type=ChatReply
    )
    assert first.text == "a short reply of six words"
    [used] = await model_usages(client, handle)
    assert used.total_tokens > 10
    # The next message is told why it gets no reply, and the chat ends: no hang.
    with pytest.raises(WorkflowUpdateFailedError) as refused:
        await handle.execute_update(ChatWorkflow.send, ChatSend(text="And now?"))
    reason = f"over budget: spent {used.total_tokens:,} of 10 tokens"
    cause = refused.value.cause
    assert isinstance(cause, ApplicationError) and cause.message == reason
    stop, spent = await over_budget(handle)
    assert (stop.message, spent.usage) == (reason, used)
    status = (await handle.describe()).status
    assert status == WorkflowExecutionStatus.FAILED and await phase(handle) == OVER_BUDGET
