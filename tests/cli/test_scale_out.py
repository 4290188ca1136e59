"""Three worker processes on one task queue, fifty plans in flight, one worker SIGKILLed
mid-load: every workflow completes, and no model call that had completed is made again.

Precisely: each worker process talks to a scripted model server of its own, so every
request is known by activity id, attempt and the process that made it. For every model
activity, the attempt that completed (its ActivityTaskStarted attempt in history) was
requested exactly once and was the last attempt requested; any earlier attempt was
requested by the killed worker (it died with the call in flight, or before it could
report the result). So a call is made again only when the worker making it died."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections import defaultdict

from temporalio.api.enums.v1 import EventType
from temporalio.client import Client, WorkflowHandle

from durafact._recipes import Goal, PlanExecuteResult, PlanExecuteWorkflow
from durafact._runtime.settings import Settings
from durafact.testing import default_reply
from tests.worker_processes import worker_processes

WORKFLOWS = 50
CALLS_PER_WORKFLOW = 5  # plan, three steps, final


async def completed_attempts(handle: WorkflowHandle) -> dict[str, int]:
    """Activity id -> the attempt that completed, from the workflow's history."""
    scheduled: dict[int, str] = {}
    started: dict[int, int] = {}
    done: dict[str, int] = {}
    async for event in handle.fetch_history_events():
        if event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
            scheduled[event.event_id] = event.activity_task_scheduled_event_attributes.activity_id
        elif event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_STARTED:
            started[event.event_id] = event.activity_task_started_event_attributes.attempt
        elif event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_COMPLETED:
            attributes = event.activity_task_completed_event_attributes
            done[scheduled[attributes.scheduled_event_id]] = started[attributes.started_event_id]
    return done


async def test_a_worker_killed_under_load_loses_no_workflow_and_repeats_no_finished_call(
    client: Client, settings: Settings
) -> None:
    async with worker_processes(client, settings, 3, default_reply) as workers:
        victim = workers[2]
        handles = [
            await client.start_workflow(
                PlanExecuteWorkflow.run,
                Goal(text=f"Scale out plan {i}"),
                id=f"scale-{i}-{uuid.uuid4().hex[:8]}",
                task_queue=settings.task_queue,
            )
            for i in range(WORKFLOWS)
        ]
        # Mid-load: about a quarter of all model calls made, then calls that reach the
        # victim are held, and it dies with at least one of them in flight.
        await asyncio.to_thread(
            workers[0].model.wait_for,
            lambda _: sum(len(w.model.calls) for w in workers) >= WORKFLOWS,
            120,
        )
        release = victim.model.hold(lambda _: True)
        held_from = time.monotonic()
        await asyncio.to_thread(victim.model.wait_for, lambda c: c.received > held_from, 60)
        victim.kill()
        release.set()
        results: list[PlanExecuteResult] = await asyncio.wait_for(
            asyncio.gather(*(handle.result() for handle in handles)), timeout=600
        )
        survivors = [worker.stop() for worker in workers[:2]]

    assert survivors == [0, 0], [w.log[-5:] for w in workers[:2]]
    assert victim.process.returncode != 0
    assert [r.answer.goal for r in results] == [f"Scale out plan {i}" for i in range(WORKFLOWS)]
    assert all(r.answer.text and len(r.results) == 3 for r in results)

    requests: dict[str, list[tuple[int, int]]] = defaultdict(list)  # id -> (attempt, worker)
    for index, worker in enumerate(workers):
        for call in worker.model.calls:
            requests[call.activity_id].append((call.attempt, index))
    completed: dict[str, int] = {}
    for handle in handles:
        completed |= await completed_attempts(handle)
    assert len(completed) == WORKFLOWS * CALLS_PER_WORKFLOW
    assert set(requests) == set(completed)
    for activity_id, made in requests.items():
        final = completed[activity_id]
        attempts = [attempt for attempt, _ in made]
        assert attempts.count(final) == 1 and max(attempts) == final, (activity_id, made)
        earlier = [worker for attempt, worker in made if attempt < final]
        assert all(worker == 2 for worker in earlier), (activity_id, made)
    # The kill did interrupt calls, and each of them was retried on a survivor.
    retried = [i for i, final in completed.items() if final > 1]
    assert retried
    for activity_id in retried:
        assert [w for a, w in requests[activity_id] if a == completed[activity_id]] in ([0], [1])
    assert all(worker.model.calls for worker in workers)  # the load was shared by all three
