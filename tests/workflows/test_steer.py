"""Stop and steer, on a real dev server with the scripted model: a ReAct run's `steer`
note and a chat's steered message reach the model's next call of the same run or
turn; a chat's `stop` ends a turn that a held model call keeps, and the next message
is answered; stop and steer are in history and replay."""

from __future__ import annotations

import asyncio

import pytest
from temporalio.client import (
    Client,
    WorkflowHandle,
    WorkflowUpdateFailedError,
    WorkflowUpdateStage,
)
from temporalio.exceptions import ApplicationError
from temporalio.service import RPCError
from temporalio.worker import Replayer

from durafact._activities.tools import tool
from durafact._core.approval import ApprovalAnswer
from durafact._core.llm import ChatTurn
from durafact._core.steer import NOT_STEERED, Steered, SteerNote
from durafact._recipes import RECIPES, ChatReply, ChatSend, ChatWorkflow, ReActResult, ReActWorkflow
from durafact._recipes.chat import STOPPED_CALL, STOPPED_REPLY
from durafact._runtime.codec import data_converter
from durafact._runtime.settings import Settings
from durafact._runtime.worker import build_worker
from durafact.testing import Call, ScriptedModel, ToolCalls
from tests.helpers import question_waiting
from tests.workflows.test_chat import start_chat
from tests.workflows.test_react import (  # noqa: F401  (react_worker: a fixture)
    DELETED,
    act,
    final,
    react_worker,
    start,
    turn_calls,
    turns,
)

NOTE = "give the result in cents"


def user_texts(call: Call) -> list[str]:
    return [m.get("content") or "" for m in call.messages if m.get("role") == "user"]


def calls_of(model: ScriptedModel, activity_id: str) -> list[Call]:
    return [c for c in model.calls if c.activity_id == activity_id]


async def replays(handle: WorkflowHandle) -> None:
    history = await handle.fetch_history()
    await Replayer(workflows=RECIPES, data_converter=data_converter()).replay_workflow(history)


async def test_a_steer_note_reaches_the_react_agents_next_model_call(
    client: Client, worker: Settings, model: ScriptedModel
) -> None:
    model.reply(turns(act("calculator", "12 * 0.25"), final("300 cents")))

    def first_turn(call: Call) -> bool:
        return call.activity_id.startswith("llm:react:") and call.activity_id.endswith(":1")

    held = model.hold(first_turn)
    handle = await start(client, worker, "What is a quarter of 12 euros?")
    await asyncio.to_thread(model.wait_for, first_turn)

    steering = await handle.start_update(
        ReActWorkflow.steer, SteerNote(text=NOTE), wait_for_stage=WorkflowUpdateStage.ACCEPTED
    )
    held.set()
    steered = await steering.result()
    result: ReActResult = await asyncio.wait_for(handle.result(), timeout=60)

    assert isinstance(steered, Steered) and steered.turn == 2
    assert result.answer == "300 cents"
    first, second = turn_calls(model)
    assert f"Note from a person: {NOTE}" not in user_texts(first)
    # After the observation of turn 1, before the model's turn 2: the person's note.
    observation, note = user_texts(second)[-2:]
    assert observation.startswith("Observation: 3") and note == f"Note from a person: {NOTE}"
    ledger = await handle.query(ReActWorkflow.artifacts)
    assert ledger.get(steered.message).typed(ChatTurn).data.content == note
    progress = await handle.query(ReActWorkflow.progress, 0)
    assert f"note from a person: {NOTE}" in [
        e.message for e in progress.events if e.kind == "steer"
    ]
    await replays(handle)


async def test_steer_is_refused_by_an_ended_run_and_by_a_chat(
    client: Client, worker: Settings, model: ScriptedModel
) -> None:
    model.reply(turns(final("4")))
    handle = await start(client, worker, "What is 2 + 2?")
    await asyncio.wait_for(handle.result(), timeout=60)
    with pytest.raises(RPCError, match="workflow execution already completed"):
        await handle.execute_update(ReActWorkflow.steer, SteerNote(text=NOTE))

    # A chat's note is a message sent with steer: true; its validator says so.
    chat = await start_chat(client, worker, stream=False)
    with pytest.raises(WorkflowUpdateFailedError) as refused:
        await chat.execute_update(ChatWorkflow.steer, SteerNote(text=NOTE))
    assert isinstance(refused.value.cause, ApplicationError)
    assert refused.value.cause.type == NOT_STEERED
    assert "steer: true" in refused.value.cause.message


def chat_with_calculator(call: Call) -> str | ToolCalls:
    """The first model call of a turn asks for the calculator; the next one answers."""
    if any(m.get("role") == "tool" for m in call.messages[-3:]):
        return "that is 300 cents"
    return ToolCalls([("calculator", {"expression": "12 * 25"})])


async def test_a_steered_message_joins_the_running_turn_before_its_next_model_call(
    client: Client, worker: Settings, model: ScriptedModel
) -> None:
    model.reply(chat_with_calculator)
    held = model.hold(lambda c: c.activity_id == "llm:chat:1")
    handle = await start_chat(client, worker, tools=["calculator"], stream=False)
    asking = asyncio.create_task(
        handle.execute_update(
            ChatWorkflow.send, ChatSend(text="12 euros in cents?"), result_type=ChatReply
        )
    )
    await asyncio.to_thread(model.wait_for, lambda c: c.activity_id == "llm:chat:1")

    steering = await handle.start_update(
        ChatWorkflow.send,
        ChatSend(text=NOTE, steer=True),
        wait_for_stage=WorkflowUpdateStage.ACCEPTED,
        result_type=ChatReply,
    )
    held.set()
    steered, answered = await steering.result(), await asyncio.wait_for(asking, 60)

    assert (steered.status, steered.steered) == ("steered", answered.seq)
    assert steered.text == f"steered turn 1 (the reply to message {answered.seq})"
    assert (answered.status, answered.text) == ("answered", "that is 300 cents")
    first, second = calls_of(model, "llm:chat:1"), calls_of(model, "llm:chat:1:2")
    assert len(first) == 1 and len(second) == 1
    # The same turn's second model call sees the tool's result, then the person's note.
    assert [m["role"] for m in second[0].messages[-2:]] == ["tool", "user"]
    assert second[0].messages[-1]["content"] == f"Note from a person: {NOTE}"
    await replays(handle)


async def test_stop_ends_a_turn_that_a_held_model_call_keeps_and_the_next_is_answered(
    client: Client, worker: Settings, model: ScriptedModel
) -> None:
    model.reply(lambda call: f"echo: {call.last_user}")
    held = model.hold(lambda c: c.activity_id == "llm:chat:1")
    handle = await start_chat(client, worker, stream=False)
    with pytest.raises(WorkflowUpdateFailedError) as idle:
        await handle.execute_update(ChatWorkflow.stop, result_type=ChatReply)
    assert isinstance(idle.value.cause, ApplicationError) and idle.value.cause.type == NOT_STEERED
    assert idle.value.cause.message == "no turn is being answered: nothing to stop"
    asking = asyncio.create_task(
        handle.execute_update(
            ChatWorkflow.send, ChatSend(text="write me an essay"), result_type=ChatReply
        )
    )
    call = await asyncio.to_thread(model.wait_for, lambda c: c.activity_id == "llm:chat:1")

    stopped = await handle.execute_update(ChatWorkflow.stop, result_type=ChatReply)
    reply = await asyncio.wait_for(asking, 60)
    after = await handle.execute_update(
        ChatWorkflow.send, ChatSend(text="just say hi"), result_type=ChatReply
    )

    assert reply == stopped
    assert (reply.status, reply.text) == ("stopped", STOPPED_REPLY)
    assert (after.status, after.text) == ("answered", "echo: just say hi")
    # The held call was cancelled (its activity hung up) and never asked again.
    await asyncio.to_thread(model.wait_for, lambda c: c is call and c.hung_up)
    assert len(calls_of(model, "llm:chat:1")) == 1
    assert not held.is_set()
    # The next turn's model call sees the stopped exchange as it was recorded.
    (next_call,) = calls_of(model, "llm:chat:2")
    assert [(m["role"], m["content"]) for m in next_call.messages[-3:]] == [
        ("user", "write me an essay"),
        ("assistant", STOPPED_REPLY),
        ("user", "just say hi"),
    ]
    await replays(handle)


async def test_stop_is_refused_while_the_turn_waits_for_a_persons_approval(
    client: Client,
    react_worker: Settings,  # noqa: F811  (the fixture imported above)
    model: ScriptedModel,
) -> None:
    model.reply(
        lambda call: (
            "kept it"
            if call.messages[-1].get("role") == "tool"
            else ToolCalls([("delete_file", {"path": "notes.txt"})])
        )
    )
    handle = await start_chat(client, react_worker, tools=["delete_file"], stream=False)
    asking = asyncio.create_task(
        handle.execute_update(
            ChatWorkflow.send, ChatSend(text="delete notes.txt"), result_type=ChatReply
        )
    )
    question = await question_waiting(handle)

    with pytest.raises(WorkflowUpdateFailedError) as refused:
        await handle.execute_update(ChatWorkflow.stop, result_type=ChatReply)

    assert isinstance(refused.value.cause, ApplicationError)
    assert refused.value.cause.message == (
        f"the turn waits for a person's answer to {question.id}: answer it"
    )
    await handle.execute_update(
        ChatWorkflow.decide, ApprovalAnswer(question_id=question.id, approved=False)
    )
    reply = await asyncio.wait_for(asking, 60)
    assert (reply.status, reply.text) == ("answered", "kept it")
    assert DELETED == []


LOOKUPS: dict[str, bool] = {}


@tool
async def slow_lookup(name: str) -> str:
    """Look a name up in a registry that takes its time (until cancelled, here)."""
    LOOKUPS[name] = False
    try:
        await asyncio.sleep(3600)
    except asyncio.CancelledError:
        LOOKUPS[name] = True  # the call was cancelled, not left running
        raise
    return "found"


async def test_stop_mid_tool_call_cancels_it_and_gives_the_call_a_stopped_result(
    client: Client, settings: Settings, model: ScriptedModel
) -> None:
    LOOKUPS.clear()
    model.reply(
        lambda call: (
            f"echo: {call.last_user}"
            if "hi" in call.last_user
            else ToolCalls([("slow_lookup", {"name": "ada"})])
        )
    )
    async with build_worker(client, settings, tools=[slow_lookup]):
        handle = await start_chat(client, settings, tools=["slow_lookup"], stream=False)
        asking = asyncio.create_task(
            handle.execute_update(
                ChatWorkflow.send, ChatSend(text="look up ada"), result_type=ChatReply
            )
        )
        while "ada" not in LOOKUPS:
            await asyncio.sleep(0.05)

        stopped = await handle.execute_update(ChatWorkflow.stop, result_type=ChatReply)
        after = await handle.execute_update(
            ChatWorkflow.send, ChatSend(text="just say hi"), result_type=ChatReply
        )

        assert (await asyncio.wait_for(asking, 30)).status == stopped.status == "stopped"
        assert after.text == "echo: just say hi"
        # The tool heard the cancellation (through its heartbeat) within its timeout.
        for _ in range(300):
            if LOOKUPS["ada"]:
                break
            await asyncio.sleep(0.05)
        assert LOOKUPS == {"ada": True}
        (next_call,) = calls_of(model, "llm:chat:2")
        assert [(m["role"], m.get("content")) for m in next_call.messages[-4:]] == [
            ("assistant", None),
            ("tool", STOPPED_CALL),
            ("assistant", STOPPED_REPLY),
            ("user", "just say hi"),
        ]
