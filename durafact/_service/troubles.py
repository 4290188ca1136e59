"""Why a running workflow does not move on, read from Temporal, not from the workflow.

Two things hold a run without ending it: an activity that Temporal retries (a model
endpoint that is down, a rate limit; until the activity's deadline), and a workflow
task that keeps failing (a bug in workflow code; Temporal retries it until a worker
with fixed code runs it). Neither is visible to the workflow's own queries: it learns
of an activity's attempts only when the activity ends, and while its task fails it
answers no query at all. Both are in the workflow's description (its pending
activities with attempt, last failure and next attempt; its pending workflow task's
attempt) and its history (the failure of the last failed workflow task), which is
where `status` and the live output of a waiting command read them.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from temporalio.api.common.v1 import WorkflowExecution
from temporalio.api.enums.v1 import (
    EventType,
    PendingActivityState,
    TimeoutType,
    WorkflowTaskFailedCause,
)
from temporalio.api.failure.v1 import Failure
from temporalio.api.history.v1 import HistoryEvent
from temporalio.api.workflowservice.v1 import GetWorkflowExecutionHistoryReverseRequest

from durafact._core.text import one_line
from durafact._runtime.codec import ENCODING, KEYS_ENV, KEYS_FILE_ENV

# Failed workflow tasks that are the server's bookkeeping, not a problem of the code: a
# reset fails the task it resets to; a signal or update that came in while a task
# completed the run makes the server ask again.
ROUTINE_TASK_FAILURES = frozenset(
    {
        WorkflowTaskFailedCause.WORKFLOW_TASK_FAILED_CAUSE_RESET_WORKFLOW,
        WorkflowTaskFailedCause.WORKFLOW_TASK_FAILED_CAUSE_UNHANDLED_COMMAND,
        WorkflowTaskFailedCause.WORKFLOW_TASK_FAILED_CAUSE_UNHANDLED_UPDATE,
    }
)

KEYLESS_WORKER = (
    "PayloadDecryptError: the run's payloads are encrypted and the worker has no keys: "
    f"give it {KEYS_ENV} or {KEYS_FILE_ENV}"
)


# The states a run ends in that `durafact resume` continues (durafact/_cli/resume.py).
RESUMABLE = ("FAILED", "TIMED_OUT", "TERMINATED")


@dataclass(frozen=True)
class Trouble:
    """One thing that holds the run; `key` is what makes it another one (the live
    output prints each key once)."""

    key: tuple[Any, ...]
    line: str

    @property
    def task(self) -> bool:
        """Whether it is the workflow task that fails (then no query is answered)."""
        return self.key[0] == "task"


async def troubles(client: Any, description: Any) -> list[Trouble]:
    """What holds the running workflow `description` describes: a failing workflow
    task first, then each activity being retried."""
    raw = description.raw_description
    found: list[Trouble] = []
    task = raw.pending_workflow_task if raw.HasField("pending_workflow_task") else None
    if task is not None and task.attempt > 1:
        failing = await task_failure(client, description.id, description.run_id)
        if failing is not None:
            kind, what = failing
            found.append(Trouble(("task", kind, what), f"{kind}: {what} (attempt {task.attempt})"))
    now = datetime.now(UTC)
    for info in raw.pending_activities:
        if info.attempt > 1 and info.HasField("last_failure"):
            found.append(
                Trouble(
                    ("activity", info.activity_id, info.attempt),
                    f"retrying {info.activity_id}: "
                    f"{failure_line(await readable(client, info.last_failure))} "
                    f"({attempt_line(info, now)})",
                )
            )
    return found


async def task_failure(client: Any, workflow_id: str, run_id: str) -> tuple[str, str] | None:
    """("workflow task failing", "TYPE: message") of the run's last workflow task, when
    it failed (or "workflow task timing out"), from the newest end of its history; None
    when the last one completed or failed for a routine reason."""
    async for event in events_newest_first(client, workflow_id, run_id):
        if event.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_COMPLETED:
            return None
        if event.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_TIMED_OUT:
            return "workflow task timing out", "no worker finished it in time"
        if event.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_FAILED:
            attributes = event.workflow_task_failed_event_attributes
            if attributes.cause in ROUTINE_TASK_FAILURES:
                return None
            if attributes.HasField("failure"):
                failure = await readable(client, attributes.failure)
                if keyless(failure):
                    return "workflow task failing", KEYLESS_WORKER
                return "workflow task failing", failure_line(failure)
            return "workflow task failing", WorkflowTaskFailedCause.Name(attributes.cause)
    return None


async def end_failure(client: Any, workflow_id: str, run_id: str) -> str | None:
    """`TYPE: message` of what failed a FAILED run: the first application error under
    the wrappers (an activity's or a child workflow's failure); None for another end."""
    async for event in events_newest_first(client, workflow_id, run_id):
        if event.event_type != EventType.EVENT_TYPE_WORKFLOW_EXECUTION_FAILED:
            return None
        failure = event.workflow_execution_failed_event_attributes.failure
        while failure.HasField("cause") and not failure.HasField("application_failure_info"):
            failure = failure.cause
        return failure_line(await readable(client, failure))
    return None


async def events_newest_first(
    client: Any, workflow_id: str, run_id: str, page_size: int = 100
) -> AsyncIterator[HistoryEvent]:
    """The run's history events, newest first, a page at a time (what is looked for is
    near the end, however long the history)."""
    token = b""
    while True:
        page = await client.workflow_service.get_workflow_execution_history_reverse(
            GetWorkflowExecutionHistoryReverseRequest(
                namespace=client.namespace,
                execution=WorkflowExecution(workflow_id=workflow_id, run_id=run_id),
                maximum_page_size=page_size,
                next_page_token=token,
            )
        )
        for event in page.history.events:
            yield event
        token = page.next_page_token
        if not token:
            return


async def readable(client: Any, failure: Failure) -> Failure:
    """`failure` with its message and its causes' as the client's keys decrypt them:
    with payload encryption the server keeps only `Encoded failure`, the real message
    being in an encrypted attribute. What these keys cannot read stays as it is."""
    plain = Failure()
    plain.CopyFrom(failure)
    converter = client.data_converter
    with contextlib.suppress(Exception):
        if converter.payload_codec is not None:
            await converter.payload_codec.decode_failure(plain)  # the causes too
    node = plain
    while True:
        if node.HasField("encoded_attributes"):
            with contextlib.suppress(Exception):
                [attributes] = converter.payload_converter.from_payloads([node.encoded_attributes])
                message = attributes.get("message") if isinstance(attributes, dict) else None
                if isinstance(message, str):
                    node.message = message
        if not node.HasField("cause"):
            return plain
        node = node.cause


def keyless(failure: Failure) -> bool:
    """Whether a worker without keys failed the task on an encrypted payload (its
    converter has no codec, durafact/_runtime/codec.py `converter_for`)."""
    while True:
        if f"Unknown payload encoding {ENCODING.decode()}" in failure.message:
            return True
        if not failure.HasField("cause"):
            return False
        failure = failure.cause


def failure_line(failure: Failure) -> str:
    """`TYPE: message` of a failure as Temporal stores it: an application error's type,
    else the kind of failure (a timeout names which)."""
    kind = failure.WhichOneof("failure_info")
    if kind == "server_failure_info" and failure.HasField("cause"):
        # A failure too large to keep with a pending activity (stack traces, a chain of
        # causes) is wrapped by the server around its truncated self.
        return failure_line(failure.cause)
    if kind == "application_failure_info" and failure.application_failure_info.type:
        name = failure.application_failure_info.type
    elif kind == "timeout_failure_info":
        timeout = TimeoutType.Name(failure.timeout_failure_info.timeout_type)
        name = f"{timeout.removeprefix('TIMEOUT_TYPE_').lower().replace('_', '-')} timeout"
    else:
        name = (kind or "failure").removesuffix("_failure_info")
    return f"{name}: {one_line(failure.message)}" if failure.message else name


def attempt_line(info: Any, now: datetime) -> str:
    """`attempt 7, next in 30 s, gives up in 23 h` of a pending activity."""
    parts = [f"attempt {info.attempt}"]
    if info.state == PendingActivityState.PENDING_ACTIVITY_STATE_STARTED:
        parts.append("running")
    elif info.HasField("next_attempt_schedule_time"):
        parts.append(f"next in {span(info.next_attempt_schedule_time.ToDatetime(UTC) - now)}")
    if info.HasField("expiration_time") and info.expiration_time.seconds > 0:
        parts.append(f"gives up in {span(info.expiration_time.ToDatetime(UTC) - now)}")
    return ", ".join(parts)


def span(delta: timedelta) -> str:
    """A wait in the unit a person reads it in: `40 s`, `12 min`, `5 h`, `3 d`."""
    seconds = max(delta.total_seconds(), 0.0)
    for unit, size in (("d", 86_400), ("h", 3_600), ("min", 60)):
        if seconds >= 2 * size:
            return f"{math.floor(seconds / size)} {unit}"
    return f"{math.ceil(seconds)} s"
