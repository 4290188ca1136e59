"""`--endpoint NAME` (repeatable) and `--fallback-after DURATION` on every command that
starts a run: they set the input's `endpoints` and `fallback_after`, checked before
anything starts."""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from temporalio.client import Client
from temporalio.testing import WorkflowEnvironment

from durafact._runtime.endpoints import Endpoint
from durafact._runtime.settings import Settings
from durafact._runtime.worker import build_worker
from durafact.testing import ScriptedModel
from tests.helpers import clean_env, starter


@pytest.fixture
async def queue(client: Client, model: ScriptedModel, backup: ScriptedModel) -> AsyncIterator[str]:
    """A worker with the endpoints `default` (the session's scripted model) and `backup`."""
    settings = Settings(
        openai_base_url=model.url,
        openai_api_key="default-key",
        endpoints={"backup": Endpoint(name="backup", base_url=backup.url, api_key="backup-key")},
        model="scripted",
        task_queue=f"test-{uuid.uuid4().hex[:8]}",
    )
    async with build_worker(client, settings):
        yield settings.task_queue


async def test_endpoint_sends_the_runs_calls_to_the_named_endpoint(
    env: WorkflowEnvironment,
    queue: str,
    model: ScriptedModel,
    backup: ScriptedModel,
    tmp_path: Path,
) -> None:
    run_env = clean_env(
        TEMPORAL_ADDRESS=env.client.service_client.config.target_host,
        DURAFACT_TASK_QUEUE=queue,
    )
    run = await starter(
        "plan",
        "Tidy the shed",
        "--endpoint",
        "Backup",
        "--fallback-after",
        "30s",
        "--json",
        env=run_env,
        cwd=tmp_path,
    )
    assert run.code == 0, run.err
    document = json.loads(run.out)
    assert document["result"]["answer"]["text"] == "done: Write the final answer."
    assert len(backup.calls) == 5  # plan, three steps, final answer
    assert model.calls == []
    history = await env.client.get_workflow_handle(document["workflow_id"]).fetch_history()
    started = history.events[0].workflow_execution_started_event_attributes
    goal = json.loads(started.input.payloads[0].data)
    assert (goal["endpoints"], goal["fallback_after"]) == (["backup"], "PT30S")


async def test_a_name_that_is_not_an_endpoint_name_is_refused_before_anything_starts(
    tmp_path: Path,
) -> None:
    for option, value, reason in (
        (
            "--endpoint",
            "http://elsewhere/v1",
            "--endpoint: not endpoint names: ['http://elsewhere/v1']",
        ),
        ("--endpoint", "backup", "--endpoint: endpoints named twice: backup"),
        ("--fallback-after", "0s", "is not a duration"),
    ):
        extra = ["--endpoint", "BACKUP"] if value == "backup" else []
        run = await starter(
            "plan", "Tidy the shed", option, value, *extra, env=clean_env(), cwd=tmp_path
        )
        assert run.code == 2, run.err
        assert reason in run.err and run.err.count("\n") == 1, run.err
    assert not (tmp_path / ".durafact").exists()  # nothing was started, not even a stack
