"""`durafact resume ID`: a failed, timed-out or terminated run goes on where it stopped.

Temporal's reset starts a new run of the same workflow id whose history is the old
run's up to one workflow task; the workflow code runs on from there. So every
activity that had completed by then (each model call, search, tool call) keeps its
result and is not made again, and a person's answers (signals) after that point are
applied again. The task is the last one that completed before the run ended; for a
failed run, the one before the task that failed it, because that task had already
seen the failure (a model call whose deadline passed, say): the call is scheduled
again, with a fresh deadline. A run that failed from its own data fails the same way
again; resume is for causes that went away (an endpoint back, a fixed worker).

Resumes of one workflow take turns: a reset of a run that another resume has just
reset would terminate that resume's new run, and neither a check of the run before the
reset nor the reset's request id prevents it (two resumes can both check before either
resets, and since Temporal 1.31 a reset run keeps its first start's request id, so the
server resets again instead of answering a repeated request with the run it made). So a
resume holds a lock while it checks and resets the run: the workflow `resume-lock:ID`,
since Temporal runs one execution of a workflow id at a time. A second resume waits
for the first one's lock to go, then finds the new run and is refused.
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import AsyncIterator
from datetime import timedelta
from typing import Any

from temporalio.api.common.v1 import WorkflowExecution
from temporalio.api.enums.v1 import EventType
from temporalio.api.workflowservice.v1 import (
    DeleteWorkflowExecutionRequest,
    ResetWorkflowExecutionRequest,
)
from temporalio.client import WorkflowFailureError
from temporalio.common import WorkflowIDConflictPolicy, WorkflowIDReusePolicy
from temporalio.exceptions import WorkflowAlreadyStartedError
from temporalio.service import RPCError, RPCStatusCode

from durafact._cli.follow import wait_and_print
from durafact._cli.output import Failed, emit_json, quoted, say
from durafact._runtime.registry import Registry
from durafact._runtime.settings import Settings
from durafact._service.runs import describe, progress_page, state_name
from durafact._service.troubles import RESUMABLE, events_newest_first

# The lock on resuming a workflow (see the module docstring): a workflow no worker runs
# (nothing polls its task queue), deleted once the reset is made; a lock left by a
# resume that was killed ends by itself.
LOCK_TYPE = "DurafactResumeLock"
LOCK_QUEUE = "durafact-resume-lock"
LOCK_TIMEOUT = timedelta(minutes=1)


async def resume(
    client: Any,
    settings: Settings,
    registry: Registry,
    workflow_id: str,
    no_wait: bool,
    as_json: bool,
) -> int:
    """Reset the workflow's latest run (see the module docstring), then follow the new
    run like `result` does."""
    async with resume_lock(client, workflow_id):
        state, old_run, event_id, run_id = await reset_latest(client, workflow_id)
    shown = await progress_page(client.get_workflow_handle(workflow_id, run_id=old_run), 0)
    handle = client.get_workflow_handle(workflow_id, run_id=run_id)
    new = await handle.describe()
    url = settings.workflow_url(workflow_id, run_id)
    if not as_json:
        say(f"resumed workflow {workflow_id}: run {run_id} goes on from event {event_id}")
        say(f"  of the {state} run {old_run}; what completed before it is not done again")
        say(f"Web UI: {url}")
    if no_wait:
        if as_json:
            emit_json(workflow_id, run_id, new.status.name if new.status else "RUNNING", None, url)
        else:
            say(f"result: durafact result {quoted(workflow_id)}")
        return 0
    recipe = registry.get(new.workflow_type)
    # The new run replays what the old one announced: printed again, marked as kept.
    before = shown.events if shown is not None else []
    return await wait_and_print(client, settings, handle, new, run_id, url, as_json, recipe, before)


@contextlib.asynccontextmanager
async def resume_lock(client: Any, workflow_id: str) -> AsyncIterator[None]:
    """Hold the lock on resuming `workflow_id`, waiting while another resume holds it."""
    lock_id = f"resume-lock:{workflow_id}"
    while True:
        try:
            lock = await client.start_workflow(
                LOCK_TYPE,
                id=lock_id,
                task_queue=LOCK_QUEUE,
                execution_timeout=LOCK_TIMEOUT,
                id_conflict_policy=WorkflowIDConflictPolicy.FAIL,
                id_reuse_policy=WorkflowIDReusePolicy.ALLOW_DUPLICATE,
                static_summary=f"durafact resume {workflow_id} is checking and resetting it",
            )
            break
        except WorkflowAlreadyStartedError:
            await lock_released(client, lock_id)
    try:
        yield
    finally:
        await client.workflow_service.delete_workflow_execution(
            DeleteWorkflowExecutionRequest(
                namespace=client.namespace,
                workflow_execution=WorkflowExecution(
                    workflow_id=lock_id, run_id=lock.result_run_id
                ),
            )
        )


async def lock_released(client: Any, lock_id: str) -> None:
    """Wait until the lock another resume holds is gone: deleted, or timed out."""
    try:
        await client.get_workflow_handle(lock_id).result()
    except WorkflowFailureError:
        pass  # deleted while running (terminated first), or timed out
    except RPCError as exc:
        if exc.status != RPCStatusCode.NOT_FOUND:  # NOT_FOUND: already deleted
            raise


async def reset_latest(client: Any, workflow_id: str) -> tuple[str, str, int, str]:
    """Reset the workflow's latest run when it resumes: its state, its run id, the event
    it goes on from, the new run's id; else a one-line refusal."""
    description = await describe(client.get_workflow_handle(workflow_id))
    check_resumable(workflow_id, description)
    state, old_run = description.status.name, description.run_id
    event_id = await reset_point(client, workflow_id, old_run, state)
    response = await client.workflow_service.reset_workflow_execution(
        ResetWorkflowExecutionRequest(
            namespace=client.namespace,
            workflow_execution=WorkflowExecution(workflow_id=workflow_id, run_id=old_run),
            reason=f"durafact resume: the {state} run {old_run} goes on from event {event_id}",
            workflow_task_finish_event_id=event_id,
            # The same for each reset of this run to this event: a server before 1.31
            # answers a repeated one with the run the first one made.
            request_id=str(uuid.uuid5(uuid.NAMESPACE_URL, f"{workflow_id}/{old_run}/{event_id}")),
            identity=client.identity,
        )
    )
    return state, old_run, event_id, response.run_id


def check_resumable(workflow_id: str, description: Any) -> None:
    """A one-line refusal unless the latest run ended in a state that resumes; a
    running run that a reset made is another resume's."""
    state = state_name(description)
    if state in RESUMABLE:
        return
    reset = description.raw_description.workflow_extended_info.HasField("last_reset_time")
    if state == "RUNNING" and reset:
        raise Failed(
            f"a resume of {workflow_id} is already under way: new run {description.run_id}"
        )
    raise Failed(refusal(workflow_id, state))


def refusal(workflow_id: str, state: str) -> str:
    """Why a run in `state` is not resumed, and what to do instead."""
    follow = f"durafact result {quoted(workflow_id)}"
    if state == "RUNNING":
        return f"workflow {workflow_id} is running: nothing to resume (follow it: {follow})"
    if state == "COMPLETED":
        return f"workflow {workflow_id} completed: nothing to resume (its result: {follow})"
    return f"workflow {workflow_id} is {state}: only a failed, timed-out or terminated run resumes"


async def reset_point(client: Any, workflow_id: str, run_id: str, state: str) -> int:
    """The event id of the WorkflowTaskCompleted to reset to: the last one of the run;
    for a failed run, the one before the task that failed it (the run's first when it
    has no other)."""
    skip = 1 if state == "FAILED" else 0
    completed: list[int] = []
    async for event in events_newest_first(client, workflow_id, run_id):
        if event.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_COMPLETED:
            completed.append(event.event_id)
            if len(completed) > skip:
                return event.event_id
    if not completed:
        raise Failed(
            f"workflow {workflow_id} never completed a workflow task: nothing to keep; "
            "start it again"
        )
    return completed[-1]
