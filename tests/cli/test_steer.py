"""`durafact steer`: a person's note is queued at once, also while the run waits for a
person, and reaches a running ReAct agent's next model call; the command says which turn
(`--wait`: once the note is in); an ended run, or one that takes no note, is one line and
exit 1."""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import Callable
from pathlib import Path

from temporalio.api.enums.v1 import EventType
from temporalio.client import Client

from durafact._core.ids import message_id, react_run
from durafact.testing import Call, ScriptedModel
from tests.helpers import question_waiting, starter
from tests.workflows.test_plan_execute import GOAL, numbered_steps
from tests.workflows.test_react import act, final, turns

QUESTION = "What is a quarter of 12 euros?"
NOTE = "give the result in cents"


def turn(n: int) -> Callable[[Call], bool]:
    """Whether a model call is a ReAct run's turn `n`."""

    def is_turn(call: Call) -> bool:
        return call.activity_id.startswith("llm:react:") and call.activity_id.endswith(f":{n}")

    return is_turn


first_turn = turn(1)


async def accepted_updates(client: Client, workflow_id: str) -> int:
    history = await client.get_workflow_handle(workflow_id).fetch_history()
    accepted = EventType.EVENT_TYPE_WORKFLOW_EXECUTION_UPDATE_ACCEPTED
    return sum(e.event_type == accepted for e in history.events)


async def test_steer_wait_puts_a_note_before_the_agents_next_turn_and_says_which(
    starter_env: dict[str, str], client: Client, model: ScriptedModel, tmp_path: Path
) -> None:
    model.reply(turns(act("calculator", "12 * 0.25"), final("300 cents")))
    held = model.hold(first_turn)
    workflow_id = f"react-{uuid.uuid4().hex[:6]}"
    started = await starter(
        "react", QUESTION, "--id", workflow_id, "--no-wait", env=starter_env, cwd=tmp_path
    )
    assert started.code == 0, started.err
    await asyncio.to_thread(model.wait_for, first_turn)

    steering = asyncio.create_task(
        starter("steer", workflow_id, NOTE, "--wait", env=starter_env, cwd=tmp_path)
    )
    while not await accepted_updates(client, workflow_id):
        await asyncio.sleep(0.1)
    held.set()
    steered = await steering

    assert steered.code == 0, steered.err
    # The question, the model's turn 1, its observation, then the note.
    note_id = message_id(react_run(QUESTION), 3)
    assert steered.out.splitlines() == [
        f"workflow {workflow_id}: the note went before turn 2 ({note_id})"
    ]
    # The note is in the agent's history when the update returns; turn 2's call may follow.
    second = await asyncio.to_thread(model.wait_for, turn(2))
    assert second.last_user == f"Note from a person: {NOTE}"


async def test_steer_says_at_once_that_a_note_is_queued_while_the_run_waits_for_a_person(
    starter_env: dict[str, str], client: Client, model: ScriptedModel, tmp_path: Path
) -> None:
    model.reply(turns(act("calculator", "12 * 0.25"), final("300 cents")))
    workflow_id = f"react-{uuid.uuid4().hex[:6]}"
    given = {"question": QUESTION, "tool_policy": {"rules": [{"action": "ask", "tool": "calc*"}]}}
    started = await starter(
        "start", "ReActWorkflow", "--input", json.dumps(given), "--id", workflow_id,
        "--no-wait", env=starter_env, cwd=tmp_path,
    )  # fmt: skip
    assert started.code == 0, started.err
    handle = client.get_workflow_handle(workflow_id)
    await question_waiting(handle)  # turn 1 asked for the calculator

    steered = await starter("steer", workflow_id, NOTE, env=starter_env, cwd=tmp_path)

    assert steered.code == 0, steered.err
    assert steered.out.splitlines() == [
        f"workflow {workflow_id}: the note is queued: it goes before turn 2 (--wait waits for it)"
    ]
    assert await question_waiting(handle)  # still waiting: the command did not wait for it
    approved = await starter("approve", workflow_id, env=starter_env, cwd=tmp_path)
    assert approved.code == 0, approved.err
    second = await asyncio.to_thread(model.wait_for, turn(2))
    assert second.last_user == f"Note from a person: {NOTE}"


async def test_steering_an_ended_run_or_a_plan_is_refused_in_one_line(
    starter_env: dict[str, str], client: Client, model: ScriptedModel, tmp_path: Path
) -> None:
    model.reply(turns(final("4")))
    workflow_id = f"react-{uuid.uuid4().hex[:6]}"
    done = await starter(
        "react", "What is 2 + 2?", "--id", workflow_id, "--json", env=starter_env, cwd=tmp_path
    )
    assert done.code == 0, done.err

    ended = await starter("steer", workflow_id, NOTE, env=starter_env, cwd=tmp_path)
    assert (ended.code, ended.out) == (1, "")
    assert ended.err_lines == [
        f"starter: workflow {workflow_id} is COMPLETED: there is nothing to steer"
    ]

    model.reply(numbered_steps)
    model.hold(lambda call: call.activity_id == f"llm:step:{GOAL}:0")
    plan_id = f"plan-{uuid.uuid4().hex[:6]}"
    started = await starter(
        "plan", GOAL, "--id", plan_id, "--no-wait", env=starter_env, cwd=tmp_path
    )
    assert started.code == 0, started.err
    await asyncio.to_thread(model.wait_for, lambda call: call.activity_id.startswith("llm:step:"))
    plan = await starter("steer", plan_id, NOTE, env=starter_env, cwd=tmp_path)
    assert (plan.code, plan.out) == (1, "")
    assert plan.err_lines == [
        f"starter: workflow {plan_id} is a PlanExecuteWorkflow: it takes no note "
        "(ReAct runs and chats do)"
    ]
    empty = await starter("steer", plan_id, " ", env=starter_env, cwd=tmp_path)
    assert (empty.code, empty.err_lines) == (2, ["starter: the note is empty"])
    model.release_all()


async def test_steering_an_idle_chat_sends_the_note_as_a_message_and_says_so(
    starter_env: dict[str, str], model: ScriptedModel, tmp_path: Path
) -> None:
    model.reply(lambda call: f"done: {call.last_user}")
    chat_id = f"chat-{uuid.uuid4().hex[:6]}"
    sent = await starter("chat", chat_id, "--send", "hello", env=starter_env, cwd=tmp_path)
    assert sent.code == 0, sent.err

    steered = await starter(
        "steer", chat_id, "use metric units", "--wait", env=starter_env, cwd=tmp_path
    )
    queued = await starter("steer", chat_id, "in grams", env=starter_env, cwd=tmp_path)

    assert steered.code == 0, steered.err
    assert steered.out.splitlines() == [
        f"chat {chat_id}: the note went in as a message of its own; its reply:",
        "  done: use metric units",
    ]
    assert queued.code == 0, queued.err
    assert queued.out.splitlines() == [
        f"chat {chat_id}: the note is queued: it joins the turn being answered before its next "
        "model call, or, with none left, is answered as a message of its own"
    ]
    await asyncio.to_thread(model.wait_for, lambda call: call.last_user == "in grams")
