"""`starter.py resume ID`: a failed, timed-out or terminated run goes on where it stopped.

Temporal's reset starts a new run of the same workflow id whose history is the old
run's up to one workflow task; the workflow code runs on from there. So every
activity that had completed by then (each model call, search, tool call) keeps its
result and is not made again, and a person's answers (signals) after that point are
applied again. The task is the last one that completed before the run ended; for a
failed run, the one before the task that failed it, because that task had already
seen the failure (a model call whose deadline passed, say): the call is scheduled
again, with a fresh deadline. A run that failed from its own data fails the same way
again; resume is for causes that went away (an endpoint back, a fixed worker).
"""

from __future__ import annotations

import uuid
from typing import Any

from temporalio.api.common.v1 import WorkflowExecution
from temporalio.api.enums.v1 import EventType
from temporalio.api.workflowservice.v1 import ResetWorkflowExecutionRequest

from durafact.cli.commands import describe
from durafact.cli.follow import wait_and_print
from durafact.cli.output import Failed, emit_json, quoted, say
from durafact.cli.trouble import RESUMABLE, events_newest_first
from durafact.runtime.registry import Registry
from durafact.runtime.settings import Settings


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
    description = await describe(client.get_workflow_handle(workflow_id))
    state = description.status.name if description.status else "UNKNOWN"
    old_run = description.run_id
    if state not in RESUMABLE:
        raise Failed(refusal(workflow_id, state))
    event_id = await reset_point(client, workflow_id, old_run, state)
    response = await client.workflow_service.reset_workflow_execution(
        ResetWorkflowExecutionRequest(
            namespace=client.namespace,
            workflow_execution=WorkflowExecution(workflow_id=workflow_id, run_id=old_run),
            reason=f"starter.py resume: the {state} run {old_run} goes on from event {event_id}",
            workflow_task_finish_event_id=event_id,
            request_id=str(uuid.uuid4()),
            identity=client.identity,
        )
    )
    run_id = response.run_id
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
            say(f"result: python starter.py result {quoted(workflow_id)}")
        return 0
    recipe = registry.get(new.workflow_type)
    result_type = recipe.result_type if recipe else None
    return await wait_and_print(client, settings, handle, new, run_id, url, as_json, result_type)


def refusal(workflow_id: str, state: str) -> str:
    """Why a run in `state` is not resumed, and what to do instead."""
    follow = f"python starter.py result {quoted(workflow_id)}"
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
