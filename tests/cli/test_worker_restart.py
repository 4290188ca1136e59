"""A worker process killed in the middle of a plan: a new worker finishes the
workflow, and model calls that had completed are not made again."""

from __future__ import annotations

import asyncio
import uuid
from collections import Counter

from temporalio.client import Client, WorkflowHandle

from durafact._recipes import Goal, PlanExecuteWorkflow
from durafact._runtime.settings import Settings
from durafact.testing import ScriptedModel
from tests.helpers import result_despite_worker_crash, start_worker

GOAL = "Survive a crash"


async def test_killed_worker_is_replaced_without_repeating_finished_calls(
    client: Client, settings: Settings, model: ScriptedModel
) -> None:
    second_step = f"llm:step:{GOAL}:1"

    async def start() -> WorkflowHandle:
        return await client.start_workflow(
            PlanExecuteWorkflow.run,
            Goal(text=GOAL),
            id=f"crash-{uuid.uuid4().hex[:8]}",
            task_queue=settings.task_queue,
        )

    result = await result_despite_worker_crash(
        client, settings, model, start=start, during=lambda c: c.activity_id == second_step
    )

    assert [r.id for r in result.results] == [f"result:step:{GOAL}:{i}" for i in range(3)]
    calls = Counter(call.activity_id for call in model.calls)
    assert calls == {
        f"llm:plan:{GOAL}": 1,
        f"llm:step:{GOAL}:0": 1,
        second_step: 2,  # the interrupted call, then its retry on the new worker
        f"llm:step:{GOAL}:2": 1,
        f"llm:final:{GOAL}": 1,
    }


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
