"""`pending` names the policy rule that asked; `approve --remember` and `decide
--remember` let an answer decide later calls, and a scope the question does not take
is refused in one line."""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from temporalio.client import Client

from durafact._recipes import ReActResult
from durafact._runtime.settings import Settings
from durafact._runtime.worker import build_worker
from durafact.testing import Call, ScriptedModel
from tests.helpers import ledger_of, question_waiting, starter
from tests.workflows.test_react import delete_file

RULE = 'ask calculator when expression contains "+"'
# A path whose end is what matters, far past what a cut label would keep.
LONG_PATH = "/tmp/" + "a" * 420 + "/../../etc/passwd"


@pytest.fixture
async def worker(client: Client, settings: Settings) -> AsyncIterator[Settings]:
    """The module's worker: the built-in tools, and a destructive one."""
    async with build_worker(client, settings, tools=[delete_file]):
        yield settings


SUMS = ["2 + 2", "2 + 2", "3 + 3"]


def sums(call: Call) -> str:
    """The calculator on each of SUMS in turn, then the answer."""
    turn = int(call.activity_id.rsplit(":", 1)[-1])
    if turn <= len(SUMS):
        action = json.dumps({"expression": SUMS[turn - 1]})
        return f"Thought: add.\nAction: calculator\nAction Input: {action}\nPAUSE"
    return "Thought: done.\nFinal Answer: 4, 4 and 6"


async def test_pending_shows_the_rule_and_approve_remember_call_skips_the_same_call(
    starter_env: dict[str, str], client: Client, model: ScriptedModel, tmp_path: Path
) -> None:
    model.reply(sums)
    workflow_id = f"react-{uuid.uuid4().hex[:6]}"
    given = {
        "question": "Add the pairs",
        "tool_policy": {
            "rules": [{"action": "ask", "tool": "calculator", "when": 'expression contains "+"'}]
        },
    }
    started = await starter(
        "start", "ReActWorkflow", "--input", json.dumps(given), "--id", workflow_id,
        "--no-wait", env=starter_env, cwd=tmp_path,
    )  # fmt: skip
    assert started.code == 0, started.err
    handle = client.get_workflow_handle(workflow_id, result_type=ReActResult)
    first = await question_waiting(handle, 1)

    pending = await starter("pending", env=starter_env, cwd=tmp_path)
    lines = pending.out.splitlines()
    mine = lines.index(f"{workflow_id}  {first.id}  approve")
    assert lines[mine + 1 : mine + 3] == [
        '  Run the tool calculator with {"expression": "2 + 2"}?',
        f"  asked by: rule 1: {RULE}",
    ]
    approved = await starter(
        "approve", workflow_id, "--remember", "call", env=starter_env, cwd=tmp_path
    )
    assert approved.code == 0, approved.err
    assert approved.out.splitlines()[0] == (
        f"approved {first.id} of workflow {workflow_id}, remembered for this call "
        "(the same tool and arguments)"
    )

    # 2 + 2 again ran without asking; 3 + 3 asks.
    second = await question_waiting(handle, 2)
    assert "3 + 3" in second.text
    chat_scope = await starter(
        "approve", workflow_id, "--remember", "chat", env=starter_env, cwd=tmp_path
    )
    assert (chat_scope.code, chat_scope.err_lines) == (
        1,
        [f"starter: decide refused: InvalidAnswer: {second.id} remembers call or tool, not chat"],
    )
    decided = await starter(
        "decide", workflow_id, "2", "--approve", "--remember", "tool", env=starter_env, cwd=tmp_path
    )
    assert decided.code == 0, decided.err
    assert decided.out.splitlines()[0] == (
        f"{second.id} approved (remembered for this tool in this run)"
    )
    result = await handle.result()
    assert [c.ok for c in result.tool_calls] == [True, True, True]
    ledger = await ledger_of(handle)
    assert [a.id for a in ledger.all() if a.id.startswith("approval:")] == [first.id, second.id]
    assert len([a for a in ledger.all() if a.id.startswith("approval-rule:")]) == 2


async def test_pending_prints_a_long_call_whole(
    starter_env: dict[str, str], client: Client, model: ScriptedModel, tmp_path: Path
) -> None:
    """A question shows every character of the call, the end of a long argument too."""
    action = json.dumps({"path": LONG_PATH})
    model.reply(
        lambda call: (
            f"Thought: tidy.\nAction: delete_file\nAction Input: {action}\nPAUSE"
            if call.activity_id.endswith(":1")
            else "Thought: done.\nFinal Answer: kept"
        )
    )
    workflow_id = f"react-{uuid.uuid4().hex[:6]}"
    given = {"question": "Tidy up", "tools": ["delete_file"]}
    started = await starter(
        "start", "ReActWorkflow", "--input", json.dumps(given), "--id", workflow_id,
        "--no-wait", env=starter_env, cwd=tmp_path,
    )  # fmt: skip
    assert started.code == 0, started.err
    handle = client.get_workflow_handle(workflow_id, result_type=ReActResult)
    question = await question_waiting(handle, 1)

    pending = await starter("pending", env=starter_env, cwd=tmp_path)
    lines = pending.out.splitlines()
    mine = lines.index(f"{workflow_id}  {question.id}  approve")
    assert lines[mine + 1] == f"  Run the destructive tool delete_file with {action}?"
    rejected = await starter("approve", workflow_id, "--reject", env=starter_env, cwd=tmp_path)
    assert rejected.code == 0, rejected.err
    await handle.result()
