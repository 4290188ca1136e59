"""A worker process killed in the middle of a plan: a new worker finishes the
workflow, and model calls that had completed are not made again."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import uuid
from collections import Counter
from pathlib import Path

from temporalio.client import Client

from durafact.settings import Settings
from tests.scripted_model import ScriptedModel
from workflows import Goal, PlanExecuteWorkflow

ROOT = Path(__file__).resolve().parent.parent
GOAL = "Survive a crash"


def start_worker(client: Client, settings: Settings) -> subprocess.Popen[bytes]:
    env = {
        **os.environ,
        "TEMPORAL_ADDRESS": client.service_client.config.target_host,
        "DURAFACT_TASK_QUEUE": settings.task_queue,
        "OPENAI_BASE_URL": settings.openai_base_url or "",
        "OPENAI_API_KEY": "test",
        "DURAFACT_MODEL": "scripted",
    }
    return subprocess.Popen(
        [sys.executable, "worker.py"],
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )


async def test_killed_worker_is_replaced_without_repeating_finished_calls(
    client: Client, settings: Settings, model: ScriptedModel
) -> None:
    second_step = f"llm:step:{GOAL}:1"
    release = model.hold(lambda call: call.activity_id == second_step and call.attempt == 1)
    first = start_worker(client, settings)
    second = None
    try:
        handle = await client.start_workflow(
            PlanExecuteWorkflow.run,
            Goal(text=GOAL),
            id=f"crash-{uuid.uuid4().hex[:8]}",
            task_queue=settings.task_queue,
        )
        await asyncio.to_thread(model.wait_for, lambda call: call.activity_id == second_step)
        first.kill()  # SIGKILL: no graceful shutdown, the model call is in flight
        first.wait()
        release.set()
        second = start_worker(client, settings)
        result = await asyncio.wait_for(handle.result(), timeout=120)
    finally:
        for process in (first, second):
            if process and process.poll() is None:
                process.terminate()
                process.wait(timeout=15)

    assert [r.index for r in result.results] == [0, 1, 2]
    calls = Counter(call.activity_id for call in model.calls)
    assert calls == {
        f"llm:plan:{GOAL}": 1,
        f"llm:step:{GOAL}:0": 1,
        second_step: 2,  # the interrupted call, then its retry on the new worker
        f"llm:step:{GOAL}:2": 1,
        f"llm:final:{GOAL}": 1,
    }
    assert first.returncode != 0
    assert second.returncode == 0, second.stderr.read().decode() if second.stderr else ""


async def test_worker_stops_cleanly_on_sigterm(client: Client, settings: Settings) -> None:
    process = start_worker(client, settings)
    assert process.stderr is not None
    started = b""
    while b"worker polling" not in started:
        line = await asyncio.to_thread(process.stderr.readline)
        assert line, "the worker exited before it started polling"
        started += line
    process.terminate()
    _, stderr = await asyncio.to_thread(process.communicate, timeout=30)
    assert process.returncode == 0, stderr.decode()
    assert b"worker stopped" in stderr
