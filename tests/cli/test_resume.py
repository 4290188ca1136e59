"""Transient failures never end a run early, and a run that failed anyway resumes
without redoing work: through the starter as a user runs it.

A model call is retried with no limit on attempts until its deadline (`--model-deadline`
per run, a day by default); meanwhile `status` and a waiting command show each retry.
`resume ID` resets a failed run (Temporal's reset) so that it goes on where it stopped:
the scripted model's record shows every call that had completed made once.
"""

from __future__ import annotations

import asyncio
import json
import re
import threading
import uuid
from collections import Counter
from datetime import timedelta
from pathlib import Path

from temporalio.api.enums.v1 import EventType
from temporalio.client import Client
from temporalio.testing import WorkflowEnvironment

from durafact._runtime.settings import Settings
from durafact._runtime.worker import build_worker
from durafact.testing import Call, ScriptedModel
from tests.helpers import clean_env, free_port, read_until, spawn, starter

GOAL = "Plan a weekend in Kraków"
ANSWER = "done: Write the final answer."


def is_step_two(call: Call) -> bool:
    return "Step 2:" in call.last_user


async def test_a_run_failed_at_its_model_deadline_resumes_without_repeating_completed_calls(
    starter_env: dict[str, str], client: Client, model: ScriptedModel, tmp_path: Path
) -> None:
    workflow_id = f"plan-resume-{uuid.uuid4().hex[:6]}"
    down = threading.Event()
    down.set()  # the endpoint answers the plan and step 1, then is down for step 2
    model.fail(503, times=1_000_000, when=lambda call: down.is_set() and is_step_two(call))

    failed = await starter(
        "plan", GOAL, "--id", workflow_id, "--model-deadline", "3s", env=starter_env, cwd=tmp_path
    )
    assert failed.code == 1
    assert len(failed.err_lines) == 1, failed.err
    step_two = model.wait_for(is_step_two).activity_id
    assert failed.err.startswith(
        f"starter: workflow {workflow_id} failed: ServerError: model endpoint answered 503"
    )
    assert (
        f"({step_two} was retried until its deadline of 3 s passed; once the cause is fixed: "
        f"durafact resume {workflow_id})"
    ) in failed.err
    status = await starter("status", workflow_id, env=starter_env, cwd=tmp_path)
    assert f"workflow {workflow_id}: FAILED" in status.out
    assert "failure: ServerError: model endpoint answered 503" in status.out
    assert f"resume: durafact resume {workflow_id}" in status.out
    before = Counter(call.activity_id for call in model.calls)

    down.clear()  # the endpoint is back
    resumed = await starter("resume", workflow_id, env=starter_env, cwd=tmp_path)
    assert resumed.code == 0, resumed.err
    assert resumed.out.startswith(f"resumed workflow {workflow_id}: run ")
    assert f"  {ANSWER}" in resumed.out.splitlines()
    # What the failed run had announced is shown as kept, not as if it ran again.
    progress = [line for line in resumed.out.splitlines() if line.startswith("  [")]
    assert "  [executing:1/3] step 1/3 done (kept)" in progress, progress
    assert "  [executing:2/3] step 2/3 done" in progress  # it ran now, after the resume
    assert [line for line in progress if line.endswith("(kept)")] == progress[:5]
    after = Counter(call.activity_id for call in model.calls)

    # Every call that had completed before the outage (the plan, step 1) was made once;
    # step 2 once more after the resume; step 3 and the answer once.
    completed = [activity for activity in before if activity != step_two]
    assert len(completed) == 2
    assert all(after[activity] == 1 for activity in completed), after
    assert after[step_two] == before[step_two] + 1
    assert sum(after.values()) == sum(before.values()) + 3
    result = await starter("result", workflow_id, "--json", env=starter_env, cwd=tmp_path)
    assert json.loads(result.out)["status"] == "COMPLETED"
    assert json.loads(result.out)["result"]["answer"]["text"] == ANSWER


async def test_of_two_concurrent_resumes_one_resets_the_run_and_the_other_is_refused(
    starter_env: dict[str, str], client: Client, model: ScriptedModel, tmp_path: Path
) -> None:
    workflow_id = f"plan-twice-{uuid.uuid4().hex[:6]}"
    model.fail(401, when=is_step_two)  # refused: the run fails at once
    failed = await starter("plan", GOAL, "--id", workflow_id, env=starter_env, cwd=tmp_path)
    assert failed.code == 1, failed.err
    # The resumed run waits at step 2 until both resumes (and a third, later) have answered.
    step_two = model.hold(is_step_two)

    runs = await asyncio.gather(
        *(starter("resume", workflow_id, "--no-wait", env=starter_env, cwd=tmp_path) for _ in "ab")
    )
    later = await starter("resume", workflow_id, env=starter_env, cwd=tmp_path)
    step_two.set()

    new_run = (await client.get_workflow_handle(workflow_id).describe()).run_id
    resumed = [run for run in runs if run.code == 0]
    assert len(resumed) == 1, runs
    assert resumed[0].out.startswith(f"resumed workflow {workflow_id}: run {new_run} ")
    refusal = f"starter: a resume of {workflow_id} is already under way: new run {new_run}"
    for refused in [run for run in runs if run.code != 0] + [later]:
        assert (refused.code, refused.out, refused.err_lines) == (1, "", [refusal])
    result = await starter("result", workflow_id, "--json", env=starter_env, cwd=tmp_path)
    assert json.loads(result.out)["run_id"] == new_run
    assert json.loads(result.out)["status"] == "COMPLETED"


async def test_resume_refuses_a_running_or_completed_run_and_an_unknown_id(
    starter_env: dict[str, str], client: Client, model: ScriptedModel, tmp_path: Path
) -> None:
    workflow_id = f"plan-refused-{uuid.uuid4().hex[:6]}"
    planning = model.hold(lambda call: call.schema_name == "Plan")
    started = await starter(
        "plan", GOAL, "--id", workflow_id, "--no-wait", env=starter_env, cwd=tmp_path
    )
    assert started.code == 0, started.err
    await asyncio.to_thread(model.wait_for, lambda call: call.schema_name == "Plan")
    running = await starter("resume", workflow_id, env=starter_env, cwd=tmp_path)
    planning.set()
    assert (await starter("result", workflow_id, env=starter_env, cwd=tmp_path)).code == 0
    completed = await starter("resume", workflow_id, "--json", env=starter_env, cwd=tmp_path)
    missing = await starter("resume", f"{workflow_id}-nope", env=starter_env, cwd=tmp_path)

    assert (running.code, running.out) == (1, "")
    assert running.err_lines == [
        f"starter: workflow {workflow_id} is running: nothing to resume "
        f"(follow it: durafact result {workflow_id})"
    ]
    assert (completed.code, completed.out) == (1, "")
    assert completed.err_lines == [
        f"starter: workflow {workflow_id} completed: nothing to resume "
        f"(its result: durafact result {workflow_id})"
    ]
    assert missing.err_lines == [f"starter: no workflow with id '{workflow_id}-nope'"]
    assert len(model.calls_for("llm:plan:")) == 1


async def test_a_rate_limit_storm_past_six_attempts_ends_in_the_result(
    starter_env: dict[str, str], client: Client, model: ScriptedModel, tmp_path: Path
) -> None:
    # Eight 429s with retry-after: 1 s, more than the six attempts a model call once had.
    model.fail(429, times=8, headers={"retry-after": "1"})
    run = await starter("plan", GOAL, "--json", env=starter_env, cwd=tmp_path)

    assert run.code == 0, run.err
    document = json.loads(run.out)
    assert document["status"] == "COMPLETED"
    assert [call.attempt for call in model.calls_for("llm:plan:")] == list(range(1, 10))
    # No --model-deadline: the recipe's default, a day, bounds each model call.
    history = await client.get_workflow_handle(document["workflow_id"]).fetch_history()
    deadlines = {
        e.activity_task_scheduled_event_attributes.schedule_to_close_timeout.ToTimedelta()
        for e in history.events
        if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED
    }
    assert deadlines == {timedelta(hours=24)}


async def test_a_model_deadline_that_is_not_a_duration_is_one_line_and_starts_nothing(
    starter_env: dict[str, str], client: Client, tmp_path: Path
) -> None:
    runs = await asyncio.gather(
        starter("plan", GOAL, "--model-deadline", "90", env=starter_env, cwd=tmp_path),
        starter("start", "PlanExecuteWorkflow", "--input", json.dumps({"text": GOAL}),
                "--model-deadline", "0s", env=starter_env, cwd=tmp_path),
    )  # fmt: skip
    for run, given in zip(runs, ("90", "0s"), strict=True):
        assert (run.code, run.out) == (2, "")
        assert run.err_lines == [
            f"starter: --model-deadline: {given!r} is not a duration (a whole number above 0 "
            "and s, m, h or d: 30s, 15m, 2h, 3d)"
        ]
    queue = starter_env["DURAFACT_TASK_QUEUE"]
    assert [w async for w in client.list_workflows(f'TaskQueue="{queue}"')] == []


async def test_a_model_endpoint_outage_is_shown_while_it_lasts_and_the_run_completes(
    env: WorkflowEnvironment, client: Client, settings: Settings, tmp_path: Path
) -> None:
    # The worker's endpoint is a port nothing listens on until the "outage" ends.
    port = free_port()
    outage = settings.model_copy(update={"openai_base_url": f"http://127.0.0.1:{port}/v1"})
    starter_env = clean_env(
        TEMPORAL_ADDRESS=env.client.service_client.config.target_host,
        DURAFACT_TASK_QUEUE=outage.task_queue,
    )
    workflow_id = f"plan-outage-{uuid.uuid4().hex[:6]}"
    retrying = re.compile(
        r"retrying llm:plan:[^:]+: ModelUnreachable: model endpoint unreachable: "
        r"Connection error\. \(attempt (\d+), (next in \d+ s|running), gives up in 23 h\)"
    )
    async with build_worker(client, outage):
        started = await starter(
            "plan", GOAL, "--id", workflow_id, "--no-wait", env=starter_env, cwd=tmp_path
        )
        assert started.code == 0, started.err
        waiting = await spawn("result", workflow_id, env=starter_env, cwd=tmp_path)
        assert waiting.stdout is not None
        try:
            seen = await read_until(waiting.stdout, "! retrying llm:plan:")
            for _ in range(60):  # until the third attempt: a few seconds of outage
                status = await starter("status", workflow_id, env=starter_env, cwd=tmp_path)
                if re.search(r"\(attempt [3-9]", status.out):
                    break
            back = ScriptedModel(port).start()  # the endpoint is back
            try:
                rest, err = await asyncio.wait_for(waiting.communicate(), 60)
            finally:
                back.stop()
        finally:
            if waiting.returncode is None:
                waiting.kill()
                await waiting.wait()

    assert retrying.fullmatch(seen[-1].removeprefix("  ! ")), seen[-1]
    assert f"workflow {workflow_id}: RUNNING" in status.out
    assert any(retrying.fullmatch(line) for line in status.out.splitlines()), status.out
    assert "recipe status: planning" in status.out
    assert waiting.returncode == 0, err.decode()
    assert f"  {ANSWER}" in rest.decode().splitlines()
    first = back.calls[0]
    assert first.activity_id.startswith("llm:plan:") and first.attempt >= 3
