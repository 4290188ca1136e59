"""An endpoint URL's credentials never reach what is shown or stored: the worker's log,
`status`, a failure message (durafact/_core/redaction.py); and a query in it goes with every
request, where it belongs (durafact/_runtime/endpoints.py)."""

from __future__ import annotations

import asyncio
import logging
import sys
import uuid

import pytest
from temporalio.client import Client, WorkflowFailureError

from durafact._core.redaction import RedactingFormatter, redact_url, redact_urls
from durafact._recipes import Goal, PlanExecuteWorkflow
from durafact._runtime.settings import Settings
from durafact._runtime.worker import build_worker
from durafact.testing import ScriptedModel
from tests.helpers import (
    DURAFACT_WORKER,
    ROOT,
    clean_env,
    read_until,
    said_until,
    spawn_command,
    starter,
)

SECRET = "s3cr3t-marker"


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        (
            f"http://user:{SECRET}@host:8/v1?api_key={SECRET}&x=1#{SECRET}",
            "http://host:8/v1?api_key=***&x=***",
        ),
        (f"https://{SECRET}@api.example.com/v1", "https://api.example.com/v1"),
        (f"http://h:port/v1?token={SECRET}", "http://h:port/v1?token=***"),
        ("http://127.0.0.1:8765/v1", "http://127.0.0.1:8765/v1"),
        (None, "api.openai.com"),
    ],
)
def test_a_url_loses_its_password_and_query_values(url: str | None, shown: str) -> None:
    assert redact_url(url) == shown


def test_every_url_in_a_text_is_redacted() -> None:
    text = f"no route for 'http://u:{SECRET}@h/v1?api_key={SECRET}' (see https://docs.example/x)"
    assert (
        redact_urls(text) == "no route for 'http://h/v1?api_key=***' (see https://docs.example/x)"
    )


def test_a_log_line_shows_every_url_without_credentials_its_traceback_too() -> None:
    url = f"http://user:{SECRET}@h:8/v1/chat/completions?api_key={SECRET}"
    try:
        raise RuntimeError(f"no answer from {url}")
    except RuntimeError:
        record = logging.makeLogRecord(
            {"msg": "HTTP Request: POST %s", "args": (url,), "exc_info": sys.exc_info()}
        )
    line = RedactingFormatter("%(name)s %(message)s").format(record)
    assert SECRET not in line
    assert "POST http://h:8/v1/chat/completions?api_key=***" in line
    assert "RuntimeError: no answer from http://h:8/v1/chat/completions?api_key=***" in line


async def test_the_worker_log_shows_its_endpoints_without_credentials(
    client: Client, model: ScriptedModel
) -> None:
    host = model.url.removeprefix("http://")
    env = clean_env(
        TEMPORAL_ADDRESS=client.service_client.config.target_host,
        DURAFACT_TASK_QUEUE=f"redact-{uuid.uuid4().hex[:8]}",
        OPENAI_BASE_URL=f"http://user:{SECRET}@{host}?api_key={SECRET}",
        DURAFACT_ENDPOINT_EMBED=f"http://{SECRET}@{host}?key={SECRET}",
        DURAFACT_ENDPOINT_EMBED_KEY=SECRET,
    )
    log = await said_until(*DURAFACT_WORKER, text="endpoint embed:", env=env, cwd=ROOT)
    assert not [line for line in log if SECRET in line]
    assert any(f"endpoint default: http://{host}?api_key=***" in line for line in log), log
    assert any(f"endpoint embed: http://{host}?key=*** (with a key)" in line for line in log)


async def test_a_failure_that_echoes_the_url_is_stored_and_shown_without_credentials(
    client: Client, settings: Settings, model: ScriptedModel
) -> None:
    echoed = f"no model at http://user:{SECRET}@gateway.example/v1/chat?api_key={SECRET}"
    model.fail(404, message=echoed)
    workflow_id = f"redact-{uuid.uuid4().hex[:8]}"
    async with build_worker(client, settings):
        handle = await client.start_workflow(
            PlanExecuteWorkflow.run,
            Goal(text="Plan a weekend"),
            id=workflow_id,
            task_queue=settings.task_queue,
        )
        with pytest.raises(WorkflowFailureError) as failed:
            await handle.result()
    stored = str(await handle.fetch_history())
    assert SECRET not in stored
    assert "gateway.example/v1/chat?api_key=***" in str(failed.value.cause.cause)
    status = await starter(
        "status",
        workflow_id,
        env=clean_env(TEMPORAL_ADDRESS=client.service_client.config.target_host),
        cwd=ROOT,
    )
    assert "ModelNotFound" in status.out + status.err
    assert SECRET not in status.out + status.err


async def test_the_worker_log_holds_no_password_after_model_calls_retries_and_a_failure(
    client: Client, model: ScriptedModel
) -> None:
    host = model.url.removeprefix("http://")
    queue = f"redact-{uuid.uuid4().hex[:8]}"
    env = clean_env(
        TEMPORAL_ADDRESS=client.service_client.config.target_host,
        DURAFACT_TASK_QUEUE=queue,
        DURAFACT_MODEL="scripted",
        OPENAI_BASE_URL=f"http://user:{SECRET}@{host}",
    )
    model.fail(500, times=1)  # each retried by Temporal
    model.fail(429, times=1, headers={"retry-after": "0"})
    worker = await spawn_command(*DURAFACT_WORKER, env=env, cwd=ROOT)
    assert worker.stderr is not None
    log = await read_until(worker.stderr, "worker polling")
    rest = asyncio.create_task(worker.stderr.read())  # read as it comes: no full pipe
    try:
        planned = await client.execute_workflow(
            PlanExecuteWorkflow.run, Goal(text="Plan a weekend"), id=queue, task_queue=queue
        )
        echoed = f"no model at http://user:{SECRET}@{host}/chat/completions"
        model.fail(404, message=echoed)  # fails the run for good
        with pytest.raises(WorkflowFailureError):
            await client.execute_workflow(
                PlanExecuteWorkflow.run, Goal(text="Plan a week"), id=f"{queue}-2", task_queue=queue
            )
    finally:
        worker.terminate()
        await asyncio.wait_for(worker.wait(), 30)
    log += (await rest).decode().splitlines()

    assert planned.final is not None
    assert [c.attempt for c in model.calls[:3]] == [1, 2, 3]  # the 500 and the 429, retried
    assert not [line for line in log if SECRET in line], "\n".join(log)
    assert any(f"no model at http://{host}/chat/completions" in line for line in log)
    assert not [line for line in log if "HTTP Request:" in line]  # the client's, at WARNING


async def test_an_endpoint_url_with_a_query_sends_it_with_every_request(
    client: Client, settings: Settings, model: ScriptedModel
) -> None:
    own = settings.model_copy(update={"openai_base_url": f"{model.url}?api-version=2024-10"})
    async with build_worker(client, own):
        await client.execute_workflow(
            PlanExecuteWorkflow.run,
            Goal(text="Plan a weekend"),
            id=f"query-{uuid.uuid4().hex[:8]}",
            task_queue=own.task_queue,
        )
    assert model.calls
    assert all(call.query == {"api-version": "2024-10"} for call in model.calls)
