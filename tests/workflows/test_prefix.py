"""Provider prompt caching: successive model calls of one run share their messages byte
for byte, system prompt first, the conversation in order, the call's own request last,
so an endpoint's prefix cache applies; every call carries the run id as
`prompt_cache_key`, and an endpoint that refuses that parameter still works. Measured on
what the scripted model received."""

from __future__ import annotations

import uuid
from typing import Any

from temporalio.client import Client

from durafact._recipes import Goal, PlanExecuteWorkflow, ReActInput, ReActWorkflow
from durafact._recipes.chat import ChatInput, ChatReply, ChatSend, ChatWorkflow
from durafact._runtime.settings import Settings
from durafact.testing import Call, ScriptedModel, ToolCalls

TURNS = 10
STEPS = 5


def agent(call: Call) -> str:
    """Text protocol: one calculation a turn, the answer on turn TURNS."""
    turn = int(call.activity_id.rsplit(":", 1)[-1])
    if turn < TURNS:
        action = f'Action: calculator\nAction Input: {{"expression": "{turn} + 1"}}'
        return f"Thought: add one more.\n{action}"
    return "Thought: done.\nFinal Answer: 10"


def native_agent(call: Call) -> str | ToolCalls:
    turn = int(call.activity_id.rsplit(":", 1)[-1])
    if turn < TURNS:
        return ToolCalls([("calculator", {"expression": f"{turn} + 1"})])
    return "10"


def planner(call: Call) -> str | dict[str, Any]:
    if call.schema_name == "Plan":
        return {"steps": [f"Do part {i + 1} of the move" for i in range(STEPS)]}
    return f"result of <{call.last_user.splitlines()[-1]}>"


def assert_shared_prefixes(calls: list[Call], run_id: str) -> None:
    """Each request's messages start with the previous request's, all but its last (the
    previous call's own request), and every request names the run for the cache."""
    for before, after in zip(calls, calls[1:], strict=False):
        kept = before.messages[:-1]
        assert after.messages[: len(kept)] == kept, after.activity_id
        assert len(after.messages) > len(kept)
    assert {call.body.get("prompt_cache_key") for call in calls} == {run_id}


async def test_a_ten_turn_react_run_sends_one_growing_prefix(
    client: Client, worker: Settings, model: ScriptedModel
) -> None:
    for protocol, reply in (("text", agent), ("native", native_agent)):
        model.reset()
        model.reply(reply)
        handle = await client.start_workflow(
            ReActWorkflow.run,
            ReActInput(question="Count to ten", protocol=protocol, max_turns=TURNS, loop_limit=0),
            id=f"prefix-react-{uuid.uuid4().hex[:8]}",
            task_queue=worker.task_queue,
        )
        result = await handle.result()
        assert (result.ending, result.turns) == ("answer", TURNS)
        calls = model.calls_for("llm:react:")
        assert len(calls) == TURNS
        assert_shared_prefixes(calls, handle.result_run_id)
        # A tool loop has no per-call request: each call sends all of the one before.
        for before, after in zip(calls, calls[1:], strict=False):
            assert after.messages[: len(before.messages)] == before.messages


async def test_a_five_step_plan_sends_one_growing_prefix(
    client: Client, worker: Settings, model: ScriptedModel
) -> None:
    model.reply(planner)
    handle = await client.start_workflow(
        PlanExecuteWorkflow.run,
        Goal(text="Move house", max_steps=STEPS),
        id=f"prefix-plan-{uuid.uuid4().hex[:8]}",
        task_queue=worker.task_queue,
    )
    result = await handle.result()
    assert len(result.steps) == STEPS
    calls = model.calls
    assert len(calls) == STEPS + 2  # the plan, each step, the final answer
    # The plan call alone has its worked examples between the system prompt and its
    # request; from the first step on, each call's messages begin with the last one's.
    assert_shared_prefixes(calls[1:], handle.result_run_id)
    # One system prompt; each earlier result a message of its own; the call's request last.
    assert len({call.messages[0]["content"] for call in calls}) == 1
    assert [len(call.messages) for call in calls] == [6, 2, 3, 4, 5, 6, 7]
    assert [call.last_user for call in calls[1:]] == [
        *(f"Step {i + 1}: Do part {i + 1} of the move" for i in range(STEPS)),
        "Write the final answer.",
    ]


def strict(call: Call) -> bool:
    return "prompt_cache_key" in call.body


async def test_an_endpoint_that_refuses_prompt_cache_key_is_asked_again_without_it_once(
    client: Client, worker: Settings, model: ScriptedModel
) -> None:
    # As a strict server does: 422 for any field it does not know, without naming it.
    model.fail(422, times=100, when=strict, message="Extra inputs are not permitted")
    result = await client.execute_workflow(
        PlanExecuteWorkflow.run,
        Goal(text="Move house"),
        id=f"prefix-strict-{uuid.uuid4().hex[:8]}",
        task_queue=worker.task_queue,
    )
    assert result.answer.text
    # The first call is refused and sent again at once, in the same attempt; no later
    # call sends the key.
    assert [strict(call) for call in model.calls] == [True] + [False] * 5  # 3 steps: 5 calls
    assert {call.attempt for call in model.calls} == {1}


async def test_a_streaming_endpoint_that_refuses_prompt_cache_key_still_streams(
    client: Client, worker: Settings, model: ScriptedModel
) -> None:
    model.fail(
        400,
        times=100,
        when=strict,
        message="Unrecognized request argument supplied: prompt_cache_key",
    )
    handle = await client.start_workflow(
        ChatWorkflow.run,
        ChatInput(),
        id=f"prefix-chat-{uuid.uuid4().hex[:8]}",
        task_queue=worker.task_queue,
    )
    for text in ("hello", "again"):
        reply = await handle.execute_update(
            ChatWorkflow.send, ChatSend(text=text), result_type=ChatReply
        )
        assert reply.text == f"done: {text}"
    sent = [(call.body.get("stream"), strict(call)) for call in model.calls]
    assert sent == [(True, True), (True, False), (True, False)]
