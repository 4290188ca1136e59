"""A closed run as its history recorded it: its input, memo and end, every activity it
scheduled with its input and result, the children it started, and what came from
outside: a person's answers to its questions, by question id, and the names of any
other input (a note, a chat message). What `durafact eval` re-runs a run from.

The history is read with the client's own data converter, so payloads encrypted with
the keys this process holds (durafact/_runtime/codec.py) and payloads kept in external
storage (durafact/_runtime/payloads.py) read as plain values here, on this machine:
nothing recorded is sent anywhere to be decoded.

An answer is what the `answer` signal or the `decide` update carried (an
`ApprovalAnswer`, durafact/_recipes/recipe.py); a run takes the first answer to a
question, so that is the one kept. An answer the run dropped (one that is no
`ApprovalAnswer`, an update that failed) is not kept; one that named no question (a
signal sent by hand answers the oldest pending) cannot be given again by its id, and
counts as other input.

A run that continued as new is read as its whole chain, first run first; a child
workflow as its own chain, after its parent's runs. Local activities (listing and
binding tools) are not read: their input is not recorded, and they run again.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from temporalio.api.common.v1 import Payload
from temporalio.api.enums.v1 import EventType
from temporalio.api.history.v1 import HistoryEvent
from temporalio.client import Client, WorkflowHistory
from temporalio.converter import DataConverter
from temporalio.exceptions import ApplicationError

from durafact._core.approval import ApprovalAnswer, answer_of
from durafact._core.text import one_line

# Signals and updates of Temporal's own libraries (a workflow stream's batches, which a
# model activity publishes to its own run), not inputs from outside.
INTERNAL_PREFIX = "__temporal"
# A person's answer to a question: the recipes' signal and update (durafact/_recipes/recipe.py).
ANSWER_SIGNAL = "answer"
DECIDE_UPDATE = "decide"
UNNAMED_ANSWER = "answer naming no question"
# How a closed run ended, by the event that closed it.
ENDS = {
    EventType.EVENT_TYPE_WORKFLOW_EXECUTION_COMPLETED: "completed",
    EventType.EVENT_TYPE_WORKFLOW_EXECUTION_FAILED: "failed",
    EventType.EVENT_TYPE_WORKFLOW_EXECUTION_CANCELED: "canceled",
    EventType.EVENT_TYPE_WORKFLOW_EXECUTION_TERMINATED: "terminated",
    EventType.EVENT_TYPE_WORKFLOW_EXECUTION_TIMED_OUT: "timed out",
    EventType.EVENT_TYPE_WORKFLOW_EXECUTION_CONTINUED_AS_NEW: "continued as new",
}


@dataclass
class RecordedActivity:
    """One activity a run scheduled: its input and, when it completed, its result, as
    plain JSON values."""

    workflow_id: str
    activity_id: str
    activity_type: str
    summary: str
    args: list[Any]
    result: Any = None
    completed: bool = False


@dataclass
class RecordedRun:
    """One run of a workflow, as its history holds it."""

    workflow_id: str
    run_id: str
    workflow_type: str
    history: WorkflowHistory
    args: list[Any] = field(default_factory=list)
    memo: dict[str, Any] = field(default_factory=dict)
    state: str = "running"
    result: Any = None
    failure: str | None = None
    activities: list[RecordedActivity] = field(default_factory=list)
    answers: dict[str, ApprovalAnswer] = field(default_factory=dict)
    """A person's answers, by question id, in the order taken."""
    outside: list[str] = field(default_factory=list)
    """The names of the other signals and updates that came from outside, in order."""
    children: list[tuple[str, str]] = field(default_factory=list)
    """(workflow id, run id) of each child workflow it started."""
    previous_run: str = ""
    next_run: str = ""


@dataclass
class Recording:
    """A run's chain, then its children's, each chain first run first: `runs[0]` is the
    run's first, `last` how it ended."""

    runs: list[RecordedRun]

    @property
    def first(self) -> RecordedRun:
        return self.runs[0]

    @property
    def last(self) -> RecordedRun:
        chain = [r for r in self.runs if r.workflow_id == self.first.workflow_id]
        return chain[-1]

    @property
    def activities(self) -> list[RecordedActivity]:
        return [a for run in self.runs for a in run.activities]

    @property
    def outside(self) -> list[str]:
        return [name for run in self.runs for name in run.outside]


async def read_recording(client: Client, workflow_id: str, run_id: str | None = None) -> Recording:
    """The recording of the run `workflow_id` (its latest run unless `run_id`), its
    earlier runs and its children's; RPCError when the server does not have it."""
    chain = await read_chain(client, workflow_id, run_id, backwards=True)
    runs = list(chain)
    pending = [child for run in chain for child in run.children]
    while pending:
        child_id, child_run = pending.pop(0)
        child_chain = await read_chain(client, child_id, child_run, backwards=False)
        runs += child_chain
        pending += [child for run in child_chain for child in run.children]
    return Recording(runs)


async def read_chain(
    client: Client, workflow_id: str, run_id: str | None, *, backwards: bool
) -> list[RecordedRun]:
    """The run, and the runs it continued from (`backwards`) or as (else), in order."""
    run = await read_run(client, workflow_id, run_id)
    chain = [run]
    while backwards and chain[0].previous_run:
        chain.insert(0, await read_run(client, workflow_id, chain[0].previous_run))
    while not backwards and chain[-1].next_run:
        chain.append(await read_run(client, workflow_id, chain[-1].next_run))
    return chain


async def read_run(client: Client, workflow_id: str, run_id: str | None) -> RecordedRun:
    handle = client.get_workflow_handle(workflow_id, run_id=run_id)
    history = await handle.fetch_history()
    return await recorded_run(history, client.data_converter)


async def recorded_run(history: WorkflowHistory, converter: DataConverter) -> RecordedRun:
    """What `history` recorded, its payloads decoded with `converter`."""
    events = list(history.events)
    started = events[0].workflow_execution_started_event_attributes
    run = RecordedRun(
        workflow_id=history.workflow_id,
        run_id=history.run_id or started.original_execution_run_id,
        workflow_type=started.workflow_type.name,
        history=history,
        args=await _values(converter, started.input.payloads),
        memo={
            key: (await _values(converter, [payload]))[0]
            for key, payload in started.memo.fields.items()
        },
        previous_run=started.continued_execution_run_id,
    )
    reading = _Reading(run, converter)
    for event in events[1:]:
        await reading.event(event)
    return run


@dataclass
class _Reading:
    """A run's history, read into `run` event by event."""

    run: RecordedRun
    converter: DataConverter
    scheduled: dict[int, RecordedActivity] = field(default_factory=dict)
    deciding: dict[str, ApprovalAnswer | None] = field(default_factory=dict)
    """The answers of the `decide` updates accepted, by update id, until they complete."""

    async def event(self, event: HistoryEvent) -> None:
        run, kind = self.run, event.event_type
        if kind == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
            await self.scheduled_activity(event)
        elif kind == EventType.EVENT_TYPE_ACTIVITY_TASK_COMPLETED:
            attributes = event.activity_task_completed_event_attributes
            activity = self.scheduled[attributes.scheduled_event_id]
            values = await self.values(attributes.result.payloads)
            activity.result = values[0] if values else None
            activity.completed = True
        elif kind == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_SIGNALED:
            attributes = event.workflow_execution_signaled_event_attributes
            if attributes.signal_name == ANSWER_SIGNAL:
                self.keep(_answer(await self.values(attributes.input.payloads)))
            elif not attributes.signal_name.startswith(INTERNAL_PREFIX):
                run.outside.append(attributes.signal_name)
        elif kind == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_UPDATE_ACCEPTED:
            request = event.workflow_execution_update_accepted_event_attributes.accepted_request
            if request.input.name == DECIDE_UPDATE:
                given = await self.values(request.input.args.payloads)
                self.deciding[request.meta.update_id] = _answer(given)
            elif not request.input.name.startswith(INTERNAL_PREFIX):
                run.outside.append(request.input.name)
        elif kind == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_UPDATE_COMPLETED:
            attributes = event.workflow_execution_update_completed_event_attributes
            answer = self.deciding.pop(attributes.meta.update_id, None)
            # An update that failed took no answer.
            if not attributes.outcome.HasField("failure"):
                self.keep(answer)
        elif kind == EventType.EVENT_TYPE_CHILD_WORKFLOW_EXECUTION_STARTED:
            execution = event.child_workflow_execution_started_event_attributes.workflow_execution
            run.children.append((execution.workflow_id, execution.run_id))
        elif kind in ENDS:
            await _read_end(run, event, self.converter)

    async def scheduled_activity(self, event: HistoryEvent) -> None:
        attributes = event.activity_task_scheduled_event_attributes
        summary = ""
        if event.user_metadata.HasField("summary"):
            summary = str((await self.values([event.user_metadata.summary]))[0])
        activity = RecordedActivity(
            workflow_id=self.run.workflow_id,
            activity_id=attributes.activity_id,
            activity_type=attributes.activity_type.name,
            summary=summary,
            args=await self.values(attributes.input.payloads),
        )
        self.scheduled[event.event_id] = activity
        self.run.activities.append(activity)

    def keep(self, answer: ApprovalAnswer | None) -> None:
        """The first answer to a question is the one the run took."""
        if answer is None:
            return
        if answer.question_id is None:
            self.run.outside.append(UNNAMED_ANSWER)
        else:
            self.run.answers.setdefault(answer.question_id, answer)

    async def values(self, payloads: Sequence[Payload]) -> list[Any]:
        return await _values(self.converter, payloads)


def _answer(given: list[Any]) -> ApprovalAnswer | None:
    """The answer a signal or an update carried; None for one the run dropped."""
    try:
        return answer_of(given[0]) if given else None
    except ValueError:
        return None


async def _read_end(run: RecordedRun, event: HistoryEvent, converter: DataConverter) -> None:
    run.state = ENDS[event.event_type]
    if event.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_COMPLETED:
        values = await _values(
            converter, event.workflow_execution_completed_event_attributes.result.payloads
        )
        run.result = values[0] if values else None
    elif event.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_FAILED:
        failure = event.workflow_execution_failed_event_attributes.failure
        run.failure = failure_line(await converter.decode_failure(failure))
    elif event.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_CONTINUED_AS_NEW:
        attributes = event.workflow_execution_continued_as_new_event_attributes
        run.next_run = attributes.new_execution_run_id


def failure_line(exc: BaseException) -> str:
    """`Type: message` of a failure, its innermost application error's when it wraps one."""
    node: BaseException | None = exc
    while node is not None and not isinstance(node, ApplicationError):
        node = node.__cause__
    found = node or exc
    kind = found.type if isinstance(found, ApplicationError) and found.type else None
    kind = kind or type(found).__name__
    text = str(found)
    # A recipe that fails a run with an error's words says its type already.
    return one_line(text if text.startswith(f"{kind}: ") else f"{kind}: {text}")


async def _values(converter: DataConverter, payloads: Sequence[Payload]) -> list[Any]:
    """The payloads as plain JSON values (dicts, lists, strings, numbers)."""
    if not payloads:
        return []
    return await converter.decode(list(payloads))
