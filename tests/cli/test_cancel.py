"""`durafact cancel`: a running run ends CANCELED and the command says why in one line;
a run that is not running, or an unknown id, is one line and exit 1."""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path

from temporalio.client import Client, WorkflowExecutionStatus

from durafact.testing import ScriptedModel
from tests.helpers import starter
from tests.workflows.test_plan_execute import GOAL, numbered_steps


async def test_cancel_ends_a_running_plan_and_result_then_says_it_was_canceled(
    starter_env: dict[str, str], client: Client, model: ScriptedModel, tmp_path: Path
) -> None:
    model.reply(numbered_steps)
    model.hold(lambda call: call.activity_id == f"llm:step:{GOAL}:1")
    workflow_id = f"plan-{uuid.uuid4().hex[:6]}"
    started = await starter(
        "plan", GOAL, "--id", workflow_id, "--no-wait", env=starter_env, cwd=tmp_path
    )
    assert started.code == 0, started.err
    await asyncio.to_thread(model.wait_for, lambda call: call.activity_id.endswith(":1"))

    canceled = await starter(
        "cancel", workflow_id, "--reason", "wrong city", env=starter_env, cwd=tmp_path
    )
    assert canceled.code == 0, canceled.err
    assert canceled.out.splitlines() == [
        f"workflow {workflow_id} was canceled: wrong city "
        f"(what it did: durafact artifacts {workflow_id})"
    ]
    described = await client.get_workflow_handle(workflow_id).describe()
    assert described.status == WorkflowExecutionStatus.CANCELED

    # `result` of a cancelled run says so, not "failed: CancelledError".
    result = await starter("result", workflow_id, env=starter_env, cwd=tmp_path)
    assert result.code == 1
    assert result.err_lines == [
        f"starter: workflow {workflow_id} was canceled: wrong city "
        f"(what it did: durafact artifacts {workflow_id})"
    ]
    # ...and its ledger is there to read.
    artifacts = await starter("artifacts", workflow_id, env=starter_env, cwd=tmp_path)
    assert artifacts.code == 0, artifacts.err
    assert f"result:step:{GOAL}:0" in artifacts.out and "cancellation" in artifacts.out

    # Cancelling it again, or an id that does not exist, is refused in one line.
    again = await starter("cancel", workflow_id, env=starter_env, cwd=tmp_path)
    assert (again.code, again.out) == (1, "")
    assert again.err_lines == [
        f"starter: workflow {workflow_id} is CANCELED: there is nothing to cancel"
    ]
    unknown = await starter("cancel", "no-such-run", env=starter_env, cwd=tmp_path)
    assert unknown.code == 1
    assert unknown.err_lines == ["starter: no workflow with id 'no-such-run'"]


async def test_cancelling_a_completed_run_is_refused_in_one_line(
    starter_env: dict[str, str], client: Client, model: ScriptedModel, tmp_path: Path
) -> None:
    model.reply(numbered_steps)
    workflow_id = f"plan-{uuid.uuid4().hex[:6]}"
    done = await starter("plan", GOAL, "--id", workflow_id, "--json", env=starter_env, cwd=tmp_path)
    assert done.code == 0, done.err

    refused = await starter("cancel", workflow_id, env=starter_env, cwd=tmp_path)

    assert (refused.code, refused.out) == (1, "")
    assert refused.err_lines == [
        f"starter: workflow {workflow_id} is COMPLETED: there is nothing to cancel"
    ]
    described = await client.get_workflow_handle(workflow_id).describe()
    assert described.status == WorkflowExecutionStatus.COMPLETED
