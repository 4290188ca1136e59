"""The repository's root is an application built on durafact, as a user builds one:
its recipes in workflows/, its activities and tools in activities/, its worker
(worker.py, DurafactPlugin on a plain Temporal worker) and its command line
(starter.py). Run here as a user runs them: processes on the dev server and the
scripted model, the app's recipe beside a ready one."""

from __future__ import annotations

import json
import os
import sys
import uuid
from pathlib import Path

from temporalio.client import Client
from temporalio.testing import WorkflowEnvironment

from durafact import Goal, PlanExecuteWorkflow
from durafact._local.embedded import Embedded
from durafact.testing import Call, ScriptedModel, default_reply
from tests.cli.test_registration import worker_process
from tests.helpers import (
    ROOT,
    clean_env,
    run_command,
    said_until,
    sdk_exit_abort,
    stand_in_model,
)


def trip_model(call: Call) -> str | dict:
    if call.schema_name == "Cities":
        return {"cities": ["Gdańsk", "Toruń", "Poznań"]}
    if call.last_user.startswith("Plan a day in "):
        return "a day in " + call.last_user.removeprefix("Plan a day in ").split(".")[0]
    return default_reply(call)


async def app(*args: str, env: dict[str, str]) -> str:
    """`python starter.py ARGS` at the root; its output once it succeeded."""
    run = await run_command(sys.executable, "starter.py", *args, env=env, cwd=ROOT, timeout=90)
    assert run.code == 0, run.err
    return run.out


async def test_the_apps_worker_runs_its_recipe_with_its_activity_beside_a_ready_one(
    env: WorkflowEnvironment, client: Client, model: ScriptedModel, tmp_path: Path
) -> None:
    model.reply(trip_model)
    queue = f"app-{uuid.uuid4().hex[:8]}"
    environment = clean_env(
        TEMPORAL_ADDRESS=env.client.service_client.config.target_host,
        DURAFACT_TASK_QUEUE=queue,
        OPENAI_BASE_URL=model.url,
        OPENAI_API_KEY="test",
        DURAFACT_MODEL="scripted",
    )
    async with worker_process(client, [sys.executable, "worker.py"], environment, cwd=ROOT):
        trip_id = f"trip-{uuid.uuid4().hex[:6]}"
        trip = {"text": "Baltic coast", "days": 2}
        await app(
            "start", "TripPlanner", "--input", json.dumps(trip), "--id", trip_id, env=environment
        )
        itinerary = await client.get_workflow_handle(trip_id).result()
        plan_out = await app(
            "plan", "Plan a weekend in Kraków", "--max-steps", "2", env=environment
        )

    assert itinerary == {"days": ["a day in Gdańsk", "a day in Toruń"]}
    # Each day's prompt has the weather this app's own activity told.
    days = [c.last_user for c in model.calls if c.last_user.startswith("Plan a day in ")]
    assert days[0] == "Plan a day in Gdańsk. The weather: windy, 12 °C."
    assert "answer:" in plan_out
    history = await client.get_workflow_handle(trip_id).fetch_history()
    scheduled = [
        e.activity_task_scheduled_event_attributes.activity_type.name
        for e in history.events
        if e.HasField("activity_task_scheduled_event_attributes")
    ]
    assert scheduled.count("forecast") == 2


async def test_the_apps_recipe_is_started_by_its_own_command_and_shown_as_it_declares(
    env: WorkflowEnvironment, client: Client, model: ScriptedModel
) -> None:
    model.reply(trip_model)
    queue = f"app-{uuid.uuid4().hex[:8]}"
    environment = clean_env(
        TEMPORAL_ADDRESS=env.client.service_client.config.target_host,
        DURAFACT_TASK_QUEUE=queue,
        OPENAI_BASE_URL=model.url,
        OPENAI_API_KEY="test",
        DURAFACT_MODEL="scripted",
    )
    help_text = await app("--help", env=environment)
    assert "trip" in help_text.split()  # listed with durafact's own commands
    trip_id = f"trip-{uuid.uuid4().hex[:6]}"
    async with worker_process(client, [sys.executable, "worker.py"], environment, cwd=ROOT):
        out = await app("trip", "Baltic coast", "--days", "2", "--id", trip_id, env=environment)
        # Not the default: the option reaches the input.
        longer = json.loads(
            await app("trip", "Baltic coast", "--days", "3", "--json", env=environment)
        )

    # TripPlanner.show_result, then where its artifacts are: no JSON, no usage line (an
    # itinerary carries none).
    lines = out.splitlines()
    assert lines[lines.index("day 1: a day in Gdańsk") + 1] == "day 2: a day in Toruń"
    assert f"artifacts: durafact artifacts {trip_id}" in lines
    handle = client.get_workflow_handle(trip_id)
    description = await handle.describe()
    assert description.workflow_type == "TripPlanner"
    assert await description.static_summary() == "trip: Baltic coast"
    assert await handle.result() == {"days": ["a day in Gdańsk", "a day in Toruń"]}
    assert longer["result"]["days"] == ["a day in Gdańsk", "a day in Toruń", "a day in Poznań"]


async def test_the_apps_worker_with_no_endpoint_uses_the_embedded_stacks_model(
    env: WorkflowEnvironment, client: Client, durafact_home: Path
) -> None:
    # No OPENAI_* and no port variable: the model `durafact up` started is found in the
    # state directory, on the port its pid file records, as durafact-worker finds it.
    queue = f"app-{uuid.uuid4().hex[:8]}"
    environment = clean_env(
        TEMPORAL_ADDRESS=env.client.service_client.config.target_host, DURAFACT_TASK_QUEUE=queue
    )
    with stand_in_model(durafact_home):
        async with worker_process(client, [sys.executable, "worker.py"], environment, cwd=ROOT):
            result = await client.execute_workflow(
                PlanExecuteWorkflow.run,
                Goal(text="Plan a weekend in Kraków", max_steps=1),
                id=f"plan-{uuid.uuid4().hex[:6]}",
                task_queue=queue,
            )
    assert result.answer.text.startswith("done: ")  # the stand-in's answer


async def test_the_apps_worker_with_no_model_endpoint_stops_with_one_line_naming_the_fix(
    env: WorkflowEnvironment,
) -> None:
    environment = clean_env(TEMPORAL_ADDRESS=env.client.service_client.config.target_host)
    run = await run_command(sys.executable, "worker.py", env=environment, cwd=ROOT, timeout=60)
    assert run.err_lines[0] == (
        "no model endpoint: set OPENAI_BASE_URL (any OpenAI-compatible server) or "
        "OPENAI_API_KEY, give DurafactPlugin endpoints=, or run `durafact up` for the "
        "local model"
    )
    # No traceback; now and then temporalio's threads abort the exit after that line.
    assert (run.code, len(run.err_lines)) == (1, 1) or sdk_exit_abort(run.code, run.err)


async def test_the_apps_worker_on_the_embedded_workers_queue_says_to_take_its_own(
    env: WorkflowEnvironment, model: ScriptedModel, durafact_home: Path
) -> None:
    queue = f"shared-{uuid.uuid4().hex[:8]}"
    address = env.client.service_client.config.target_host
    # A process recorded as the stack's worker on that queue of this server, as `up`
    # records its worker.
    argv = [sys.executable, "-c", "import time; time.sleep(60)"]
    stacks = Embedded(durafact_home).piece("worker")
    stacks_worker = stacks.start(argv, os.environ, durafact_home, task_queue=queue, address=address)
    environment = clean_env(
        TEMPORAL_ADDRESS=address, DURAFACT_TASK_QUEUE=queue, OPENAI_BASE_URL=model.url
    )
    try:
        said = await said_until(
            sys.executable, "worker.py", text="task queue", env=environment, cwd=ROOT
        )
    finally:
        stacks_worker.kill()
        stacks_worker.wait()
    assert said[-1] == (
        f"task queue {queue!r} is polled by the embedded stack's worker too (durafact up, "
        f"pid {stacks_worker.pid}): each takes tasks of recipes only the other may have "
        "registered; give this worker a queue of its own (DURAFACT_TASK_QUEUE, or "
        "Worker(task_queue=...))"
    )
