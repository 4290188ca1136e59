"""The tool approval policy end to end on a real dev server: the scripted model plays
the agent, the worker runs a real destructive tool of this module, and a person's
answers (the `decide` update) may be remembered: for one call, one tool in one run,
or a chat across continue-as-new; a PlanReAct child inherits them; `deny` never runs
the tool and asks nobody."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from temporalio.client import Client, WorkflowHandle, WorkflowUpdateFailedError

from durafact._activities.tools import tool
from durafact._core.approval import ApprovalAnswer, ApprovalQuestion, RememberScope
from durafact._core.ledger import Ledger
from durafact._core.sources import SourceSpec
from durafact._core.tool_policy import DEFAULT_ASK, RememberedDecision, arguments_hash
from durafact._recipes import (
    PlanReActInput,
    PlanReActWorkflow,
    ReActInput,
    ReActResult,
    ReActWorkflow,
)
from durafact._recipes.chat import ChatInput, ChatReply, ChatSend, ChatWorkflow
from durafact._recipes.react_search import SEARCH_SOURCES
from durafact._recipes.recipe import Progress
from durafact._runtime.settings import Settings
from durafact._runtime.worker import build_worker
from durafact.testing import Call, ScriptedModel, ToolCalls
from tests.helpers import ledger_of, question_waiting, scheduled_activities

DELETED: list[str] = []


@tool(destructive=True)
def delete_file(path: str) -> str:
    """Delete a file for good."""
    DELETED.append(path)
    return f"deleted {path}"


@tool
def read_file(path: str) -> str:
    """Read a file."""
    return f"contents of {path}"


@pytest.fixture
async def policy_worker(client: Client, settings: Settings) -> AsyncIterator[Settings]:
    DELETED.clear()
    async with build_worker(client, settings, tools=[delete_file, read_file]):
        yield settings


def act(tool: str, path: str) -> str:
    return (
        f'Thought: I should use a tool.\nAction: {tool}\nAction Input: {{"path": "{path}"}}\nPAUSE'
    )


FINAL = "Thought: done.\nFinal Answer: done"


def turns(*replies: str) -> Callable[[Call], str]:
    """Reply n answers the model call of turn n; the last one answers every later turn."""

    def reply(call: Call) -> str:
        turn = int(call.activity_id.rsplit(":", 1)[-1])
        return replies[min(turn, len(replies)) - 1]

    return reply


async def start(client: Client, settings: Settings, question: str, **kw: Any) -> WorkflowHandle:
    return await client.start_workflow(
        ReActWorkflow.run,
        ReActInput(question=question, tools=["delete_file", "read_file"], **kw),
        id=f"policy-{uuid.uuid4().hex[:8]}",
        task_queue=settings.task_queue,
    )


async def decide(
    handle: WorkflowHandle,
    question: ApprovalQuestion,
    approved: bool = True,
    remember: RememberScope | None = None,
) -> None:
    await handle.execute_update(
        "decide",
        ApprovalAnswer(question_id=question.id, approved=approved, by="ops", remember=remember),
    )


async def asked(handle: WorkflowHandle) -> list[ApprovalQuestion]:
    ledger = await ledger_of(handle)
    return [a.data for a in ledger.find_all(ApprovalQuestion)]


def rules_of(ledger: Ledger) -> list[RememberedDecision]:
    return [a.data for a in ledger.find_all(RememberedDecision)]


async def announced(handle: WorkflowHandle, kind: str) -> list[str]:
    progress = await handle.query("progress", 0, result_type=Progress)
    return [e.message for e in progress.events if e.kind == kind]


async def test_remember_call_runs_the_same_call_again_and_asks_for_other_arguments(
    client: Client, policy_worker: Settings, model: ScriptedModel
) -> None:
    a, b = "/tmp/a.txt", "/tmp/b.txt"
    model.reply(turns(act("delete_file", a), act("delete_file", a), act("delete_file", b), FINAL))
    before = datetime.now(UTC)
    handle = await start(client, policy_worker, "Clean up the temp files")
    first = await question_waiting(handle, 1)
    assert first.rule == DEFAULT_ASK and first.remember == ["call", "tool"]
    await decide(handle, first, remember="call")
    # The same call again ran without a question; the other arguments ask.
    second = await question_waiting(handle, 2)
    assert b in second.text and a not in second.text
    assert [a, a] == DELETED
    await decide(handle, second)
    result: ReActResult = await asyncio.wait_for(handle.result(), timeout=60)

    assert [a, a, b] == DELETED
    assert [q.id for q in await asked(handle)] == [first.id, second.id]
    ledger = await ledger_of(handle)
    (rule,) = rules_of(ledger)
    assert (rule.scope, rule.tool, rule.arguments_hash, rule.approved, rule.by) == (
        "call",
        "delete_file",
        arguments_hash({"path": a}),
        True,
        "ops",
    )
    assert rule.question_id == first.id and before <= rule.at <= datetime.now(UTC)
    assert rule.id in ledger and rule.id.startswith("approval-rule:delete_file:call:")
    assert await announced(handle, "remembered") == [
        f"remembered as {rule.id}",
        f"delete_file approved without asking: {rule.id} (ops answered {first.id})",
    ]
    assert result.remembered == [rule]  # what a PlanReAct parent passes on


async def test_remember_tool_passes_any_arguments_in_this_run_only(
    client: Client, policy_worker: Settings, model: ScriptedModel
) -> None:
    model.reply(turns(act("delete_file", "/tmp/1"), act("delete_file", "/tmp/2"), FINAL))
    handle = await start(client, policy_worker, "Delete two files")
    first = await question_waiting(handle, 1)
    # A ReAct run is no chat: that scope is refused before anything reaches history.
    with pytest.raises(WorkflowUpdateFailedError) as refused:
        await decide(handle, first, remember="chat")
    assert "remembers call or tool, not chat" in str(refused.value.cause)
    await decide(handle, first, remember="tool")
    result: ReActResult = await asyncio.wait_for(handle.result(), timeout=60)
    assert DELETED == ["/tmp/1", "/tmp/2"] and len(await asked(handle)) == 1
    assert [r.id for r in rules_of(await ledger_of(handle))] == ["approval-rule:delete_file:tool"]
    assert result.remembered == []  # a `tool` decision stays in its run

    # Another run of the same question asks again; a remembered rejection refuses both.
    again = await start(client, policy_worker, "Delete two files")
    question = await question_waiting(again, 1)
    await decide(again, question, approved=False, remember="tool")
    refused_twice: ReActResult = await asyncio.wait_for(again.result(), timeout=60)
    assert [c.error_type for c in refused_twice.tool_calls] == ["NotApproved", "NotApproved"]
    assert DELETED == ["/tmp/1", "/tmp/2"] and len(await asked(again)) == 1


async def all_waiting(handle: WorkflowHandle, count: int) -> list[ApprovalQuestion]:
    """The questions that wait, once `count` of them do (polls `pending_questions`)."""
    for _ in range(600):
        waiting = await handle.query("pending_questions", result_type=list[ApprovalQuestion])
        if len(waiting) == count:
            return waiting
        await asyncio.sleep(0.025)
    raise AssertionError(f"{count} questions never waited together in {handle.id}")


@pytest.mark.parametrize("approved", [True, False])
async def test_a_remembered_answer_settles_the_same_call_waiting_beside_it(
    client: Client, policy_worker: Settings, model: ScriptedModel, approved: bool
) -> None:
    """A native turn asks for three deletions at once: a, a, b. The answer to the first
    question, remembered for that call, answers the second (the same call) as well,
    by the decision; the third (other arguments) still waits for a person."""
    a, b = "/tmp/a", "/tmp/b"
    calls = ToolCalls(
        [("delete_file", {"path": a}), ("delete_file", {"path": a}), ("delete_file", {"path": b})]
    )
    model.reply(turns(calls, "done"))
    handle = await start(client, policy_worker, "Tidy up", protocol="native")
    first, second, third = await all_waiting(handle, 3)
    assert [q.arguments_hash for q in (first, second, third)] == [
        arguments_hash({"path": path}) for path in (a, a, b)
    ]
    await decide(handle, first, approved=approved, remember="call")
    (still,) = await all_waiting(handle, 1)
    assert still.id == third.id
    await decide(handle, third)
    result: ReActResult = await asyncio.wait_for(handle.result(), timeout=60)

    (rule,) = rules_of(await ledger_of(handle))
    settled = {q.id: q for q in await asked(handle)}[second.id]
    assert settled.status == ("approved" if approved else "rejected")
    assert settled.answer is not None and settled.answer.by == rule.id
    assert [c.ok for c in result.tool_calls] == [approved, approved, True]
    assert ([a, a, b] if approved else [b]) == DELETED
    why = "" if approved else f": rejected in {first.id}"
    assert f"{second.id} {settled.status} by {rule.id}{why}" in await announced(handle, "approval")


async def test_the_questions_of_one_turn_are_asked_in_the_order_of_its_calls(
    client: Client, policy_worker: Settings, model: ScriptedModel, tmp_path: Path
) -> None:
    """A native turn asks for a deletion, a search of the run's sources and another
    deletion, each under an `ask` rule. The search binds in the workflow at once, the
    deletions in the worker later; still question n is about call n, as a person reads
    the model's reply."""
    (tmp_path / "tides.md").write_text("# Tides\n\nThe spring tide rises seven metres.")
    calls = [
        ("delete_file", {"path": "/tmp/a"}),
        (SEARCH_SOURCES, {"query": "spring tide"}),
        ("delete_file", {"path": "/tmp/b"}),
    ]
    model.reply(turns(ToolCalls(calls), "done"))
    handle = await start(
        client,
        policy_worker,
        "Tidy up and look up the tide",
        protocol="native",
        sources=[SourceSpec.files(str(tmp_path))],
        tool_policy={"rules": [{"action": "ask", "tool": SEARCH_SOURCES}]},
    )
    waiting = await all_waiting(handle, len(calls))
    assert [(q.n, q.tool, q.arguments) for q in waiting] == [
        (n, tool, arguments) for n, (tool, arguments) in enumerate(calls, start=1)
    ]
    # Each names its call: `tool:{run}:{turn}:{k}`.
    assert [q.tool_call_id and q.tool_call_id.rsplit(":", 1)[1] for q in waiting] == [
        "0",
        "1",
        "2",
    ]
    for question in waiting:
        await decide(handle, question)
    result: ReActResult = await asyncio.wait_for(handle.result(), timeout=60)
    assert [(c.tool, c.ok) for c in result.tool_calls] == [(tool, True) for tool, _ in calls]
    assert sorted(DELETED) == ["/tmp/a", "/tmp/b"]


async def test_deny_never_calls_the_tool_and_asks_nobody(
    client: Client, policy_worker: Settings, model: ScriptedModel
) -> None:
    rules = [
        {"action": "deny", "tool": "delete_*", "when": 'path startswith "/etc/"'},
        {"action": "allow", "tool": "delete_file", "when": 'path startswith "/tmp/"'},
    ]
    model.reply(turns(act("delete_file", "/etc/passwd"), act("delete_file", "/tmp/x"), FINAL))
    handle = await start(
        client, policy_worker, "Delete the password file", tool_policy={"rules": rules}
    )
    result: ReActResult = await asyncio.wait_for(handle.result(), timeout=60)
    # Denied: never sent to the worker; the allowed destructive call ran without a question.
    assert DELETED == ["/tmp/x"]
    assert [(c.ok, c.error_type) for c in result.tool_calls] == [
        (False, "DeniedByPolicy"),
        (True, None),
    ]
    shown = model.calls_for("llm:react:")[1].last_user
    assert (
        shown == 'Observation: denied by policy: rule 1: deny delete_* when path startswith "/etc/"'
    )
    assert await asked(handle) == []
    scheduled = await scheduled_activities(client, handle)
    assert [s.activity_id for s in scheduled if s.activity_id.startswith("tool:")] == [
        "tool:Delete the password file:2:0"
    ]


async def test_an_ask_rule_asks_before_a_tool_that_is_not_destructive(
    client: Client, policy_worker: Settings, model: ScriptedModel
) -> None:
    model.reply(turns(act("read_file", "/home/secrets"), FINAL))
    handle = await start(
        client,
        policy_worker,
        "Read the secrets",
        tool_policy={
            "rules": [{"action": "ask", "tool": "read_*", "when": 'path contains "secret"'}]
        },
    )
    question = await question_waiting(handle, 1)
    assert question.rule == 'rule 1: ask read_* when path contains "secret"'
    assert question.text == 'Run the tool read_file with {"path": "/home/secrets"}?'
    await decide(handle, question)
    result: ReActResult = await asyncio.wait_for(handle.result(), timeout=60)
    assert [c.ok for c in result.tool_calls] == [True]


async def test_a_plan_react_child_inherits_remembered_decisions(
    client: Client, policy_worker: Settings, model: ScriptedModel
) -> None:
    """Step 1's agent asks, and the answer is remembered for that call; step 2's agent
    makes that call without asking, and another one the parent's input remembered."""
    goal = "Tidy the temp folder"
    given = RememberedDecision(
        scope="call",
        tool="delete_file",
        arguments_hash=arguments_hash({"path": "/tmp/b"}),
        approved=True,
        by="lead",
        at=datetime(2026, 12, 1, tzinfo=UTC),
        question_id="approval:earlier:1",
    )
    agents = [
        [act("delete_file", "/tmp/a"), FINAL],
        [act("delete_file", "/tmp/a"), act("delete_file", "/tmp/b"), FINAL],
    ]

    def reply(call: Call) -> str | dict:
        if call.schema_name == "Plan":
            return {"steps": ["Delete a", "Delete a and b"]}
        if call.activity_id.startswith("llm:react:"):
            replies = agents[int(call.workflow_id.rsplit(":", 1)[-1])]
            return turns(*replies)(call)
        return "tidied"

    model.reply(reply)
    handle = await client.start_workflow(
        PlanReActWorkflow.run,
        PlanReActInput(
            text=goal,
            tools=["delete_file"],
            tool_policy={"remembered": [given.model_dump()]},
        ),
        id=f"plan-policy-{uuid.uuid4().hex[:8]}",
        task_queue=policy_worker.task_queue,
    )
    step1 = client.get_workflow_handle(f"{handle.id}/step:{goal}:0")
    await decide(step1, await question_waiting(step1, 1), remember="call")
    await asyncio.wait_for(handle.result(), timeout=60)

    assert DELETED == ["/tmp/a", "/tmp/a", "/tmp/b"]
    step2 = client.get_workflow_handle(f"{handle.id}/step:{goal}:1")
    assert await asked(step2) == []
    learned = rules_of(await ledger_of(step1))[-1]
    assert {r.id for r in rules_of(await ledger_of(step2))} == {given.id, learned.id}
    assert len(await announced(step2, "remembered")) == 2
    assert {r.id for r in rules_of(await ledger_of(handle))} == {given.id, learned.id}


# --- chat -------------------------------------------------------------------------------


def chat_agent(call: Call) -> str | ToolCalls:
    """`delete PATH` asks for delete_file(PATH); a tool result is reported; else `ok`."""
    last = call.messages[-1]
    if last.get("role") == "tool":
        return f"done: {last.get('content')}"
    if call.last_user.startswith("delete "):
        return ToolCalls([("delete_file", {"path": call.last_user.removeprefix("delete ")})])
    return "ok"


async def send(handle: WorkflowHandle, text: str) -> ChatReply:
    return await handle.execute_update(
        ChatWorkflow.send, ChatSend(text=text), result_type=ChatReply
    )


async def test_remember_chat_survives_continue_as_new(
    client: Client, policy_worker: Settings, model: ScriptedModel
) -> None:
    model.reply(chat_agent)
    handle = await client.start_workflow(
        ChatWorkflow.run,
        ChatInput(tools=["delete_file"], stream=False, continue_after_events=100),
        id=f"chat-policy-{uuid.uuid4().hex[:8]}",
        task_queue=policy_worker.task_queue,
    )
    replying = asyncio.create_task(send(handle, "delete /tmp/one"))
    question = await question_waiting(handle, 1)
    assert question.remember == ["call", "tool", "chat"]
    await decide(handle, question, remember="chat")
    assert (await replying).text == "done: deleted /tmp/one"
    small_talk = 0
    while (await send(handle, f"hello {small_talk}")).run == 0:
        small_talk += 1
        assert small_talk < 50, "the chat never continued as new"

    reply = await asyncio.wait_for(send(handle, "delete /tmp/two"), timeout=30)
    assert reply.text == "done: deleted /tmp/two" and reply.run >= 1
    assert DELETED == ["/tmp/one", "/tmp/two"]
    # The run that answered holds the decision and asked nothing.
    ledger = await ledger_of(handle)
    assert [r.id for r in rules_of(ledger)] == ["approval-rule:delete_file:chat"]
    assert ledger.find_all(ApprovalQuestion) == []
    assert len(await announced(handle, "remembered")) == 1
