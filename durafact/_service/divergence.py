"""Why a run's history does not replay against today's code, in words.

Temporal's core stops a replay at the first command of the code that does not match the
event the run recorded, and says so in a message of its own ("Activity id of scheduled
event 'llm:plan' does not match activity id of activity command 'llm:draft'", "Timer
machine does not handle this event: HistoryEvent(id: 5, ActivityTaskScheduled)", ...).
`divergence` reads that message with the history: the event (its id and type), what the
run recorded there, what the code does instead, and the likely cause. A failure that is
no nondeterminism, the code raising while it replays, is read by `raised`.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

from temporalio.api.enums.v1 import EventType
from temporalio.api.history.v1 import HistoryEvent
from temporalio.client import WorkflowHistory

from durafact._core.text import one_line

# A change of order guarded by this is no divergence: the words every cause ends with.
UNPATCHED = "without `workflow.patched`"
PATCH_MARKER = "core_patch"
# The codec's error for a payload whose key this process lacks (durafact/_runtime/codec.py).
DECRYPT_ERROR = "PayloadDecryptError"
# Frames of the SDK itself say nothing of where the code failed.
SDK_PACKAGE = "temporalio"
LOCAL_ACTIVITY_MARKER = "core_local_activity"

# The failure the core reports, inside the SDK's exception text (Rust's debug form).
FAILURE_MESSAGE = re.compile(r'message: "((?:[^"\\]|\\.)*)"')
FAILURE_TYPE = re.compile(r'r#type: "((?:[^"\\]|\\.)*)"')
STACK_TRACE = re.compile(r'stack_trace: "((?:[^"\\]|\\.)*)"')
ESCAPE = re.compile(r"\\(.)")
ESCAPED = {"n": "\n", "t": "\t", "r": "\r"}
NONDETERMINISM = re.compile(r"^(\[TMPRL\d+\] )?Nondeterminism error: ")

# The core's messages (sdk-core, worker/workflow/machines).
MISMATCH = re.compile(
    r"^(?P<what>Activity|Child workflow) (?P<field>id|type) of (?:scheduled event|recorded "
    r"marker) '(?P<recorded>.*)' does not match .* of (?P<local>local activity )?(?:activity )?"
    r"command '(?P<now>.*)'$",
    re.DOTALL,
)
MACHINE = re.compile(
    r"^(?P<machine>.+?)(?: machine)? (?:does not|cannot) handle (?:this event: )?(?P<event>.*)$",
    re.DOTALL,
)
NO_COMMAND = re.compile(r"^No command scheduled for event (?P<event>.*)$", re.DOTALL)
PATCH_REMOVED = re.compile(r"^Non-deprecated patch marker encountered for change (?P<id>.+?),")
PATCH_CHANGED = re.compile(r"^Change id (?P<recorded>.+) does not match expected id (?P<now>.+)$")
EVENT_ID = re.compile(r"\bid: (\d+)|\bevent_id: (\d+)")
FRAME = re.compile(r'File "(?P<file>[^"]+)", line (?P<line>\d+), in (?P<function>\S+)')

# What the code does instead, by the core's state machine that met the recorded event.
COMMANDS = {
    "Activity": "an activity (a model, source or tool call)",
    "Local activity": "a local activity",
    "Timer": "a timer (a sleep, or a wait with a timeout)",
    "Child workflow": "a child workflow",
    "Change": "a `workflow.patched` marker",
    "Complete workflow": "the run's end (completed)",
    "Fail workflow": "the run's end (failed)",
    "Cancel workflow": "the run's end (canceled)",
    "Continue as new workflow": "continue-as-new",
    "Signal external WF": "a signal to another workflow",
    "Cancel external WF": "a cancellation of another workflow",
    "Update": "an update's answer",
    "UpsertWorkflowSearchAttributesMachine": "a search attribute update (a phase)",
    "ModifyWorkflowPropertiesMachine": "a memo update",
    "Nexus operation": "a Nexus operation",
}


@dataclass(frozen=True)
class Divergence:
    """Where and why a history does not replay. `event_id` and `event_type` are None when
    the failure names no event of the history (the code raised)."""

    event_id: int | None
    event_type: str | None
    recorded: str | None
    """What the run recorded at that event (`activity llm:plan`)."""
    now: str | None
    """What the code does there instead."""
    cause: str
    """The likely cause, in words."""
    error: str
    """The failure as the SDK reported it, one line."""


def core_message(failure: BaseException) -> str:
    """The failure's own message, out of the SDK's text around it."""
    text = str(failure)
    found = FAILURE_MESSAGE.search(text)
    return unescape(found.group(1)) if found else text


def unescape(text: str) -> str:
    return ESCAPE.sub(lambda match: ESCAPED.get(match.group(1), match.group(1)), text)


def divergence(failure: BaseException, history: WorkflowHistory) -> Divergence:
    """A nondeterminism failure of `history`'s replay, read."""
    message = NONDETERMINISM.sub("", core_message(failure))
    if found := MISMATCH.match(message):
        return mismatch(found, message, history)
    if found := PATCH_REMOVED.match(message):
        patch = found.group("id")
        event = patch_marker(history, patch)
        return at(
            event,
            message,
            now="no `workflow.patched` there",
            cause=f"the code no longer calls `workflow.patched({patch!r})`, which the run "
            "recorded: keep it (or `workflow.deprecate_patch`) while runs that recorded it "
            "may replay",
        )
    if found := PATCH_CHANGED.match(message):
        recorded, now = found.group("recorded"), found.group("now")
        return at(
            patch_marker(history, recorded),
            message,
            now=f"`workflow.patched({now!r})`",
            cause="a patch renamed, or patches reordered",
        )
    if found := NO_COMMAND.match(message):
        event = event_named(history, found.group("event"))
        return at(
            event,
            message,
            now="nothing",
            cause=f"a call removed or moved later, {UNPATCHED}",
        )
    if found := MACHINE.match(message):
        event = event_named(history, found.group("event"))
        machine = found.group("machine")
        return at(
            event,
            message,
            now=COMMANDS.get(machine, f"another command ({machine})"),
            cause=f"a step added, removed or reordered before it, {UNPATCHED}",
        )
    event = event_named(history, message)
    return at(
        event,
        message,
        now=None,
        cause=f"the code's commands differ from what the run recorded, {UNPATCHED}",
    )


def mismatch(found: re.Match[str], message: str, history: WorkflowHistory) -> Divergence:
    """The code starts another activity or child workflow than the run did there."""
    what = "local activity" if found.group("local") else found.group("what").lower()
    field, recorded, now = found.group("field"), found.group("recorded"), found.group("now")
    event = started_event(history, what, field, recorded)
    if field == "type":
        cause = f"the {what} called there changed, {UNPATCHED}"
    else:
        cause = f"a hook or call added, removed or reordered before it, {UNPATCHED}"
    return at(event, message, now=f"{what} {now}", cause=cause)


def at(event: HistoryEvent | None, message: str, *, now: str | None, cause: str) -> Divergence:
    return Divergence(
        event_id=event.event_id if event else None,
        event_type=type_name(event) if event else None,
        recorded=detail(event) if event else None,
        now=now,
        cause=cause,
        error=one_line(message),
    )


def raised(failure: BaseException) -> Divergence:
    """A replay that failed because the code raised (or could not run at all): the
    exception and where in the code, as the SDK reported them."""
    text = str(failure)
    message = one_line(core_message(failure))
    kind = FAILURE_TYPE.search(text)
    name = unescape(kind.group(1)) if kind else ""
    error = f"{name}: {message}" if name else message
    if name == DECRYPT_ERROR:
        return Divergence(
            event_id=None,
            event_type=None,
            recorded=None,
            now=f"cannot read the run: {message}",
            cause="check runs without the key the run's payloads are encrypted with: give "
            "it the workers' keys (DURAFACT_KEYS or DURAFACT_KEYS_FILE)",
            error=error,
        )
    trace = STACK_TRACE.search(text)
    frames = [
        frame
        for frame in FRAME.finditer(unescape(trace.group(1)) if trace else "")
        if SDK_PACKAGE not in Path(frame["file"]).parts
    ]
    where = ""
    if frames:
        last = frames[-1]
        where = f" ({Path(last['file']).name}:{last['line']}, in {last['function']})"
    return Divergence(
        event_id=None,
        event_type=None,
        recorded=None,
        now=f"raises {error}{where}",
        cause="the code fails on this run's history: a worker with it retries the run's "
        "workflow task until the code is fixed",
        error=error,
    )


# --- the history's events --------------------------------------------------------------


def type_name(event: HistoryEvent) -> str:
    """`ActivityTaskScheduled`: the event's type as the Web UI and the core name it."""
    name = EventType.Name(event.event_type).removeprefix("EVENT_TYPE_")
    return "".join(word.capitalize() for word in name.split("_"))


def event_named(history: WorkflowHistory, text: str) -> HistoryEvent | None:
    """The event whose id the core's text names (`HistoryEvent(id: 5, ...)`)."""
    found = EVENT_ID.search(text)
    if not found:
        return None
    number = int(found.group(1) or found.group(2))
    return next((e for e in history.events if e.event_id == number), None)


def started_event(
    history: WorkflowHistory, what: str, field: str, recorded: str
) -> HistoryEvent | None:
    """The event that started the activity or child workflow the run recorded: found by
    its id (unique in a run), or by its type when only one event has it."""
    found = []
    for event in history.events:
        if what == "activity" and event.HasField("activity_task_scheduled_event_attributes"):
            attributes = event.activity_task_scheduled_event_attributes
            value = attributes.activity_id if field == "id" else attributes.activity_type.name
        elif what == "child workflow" and event.HasField(
            "start_child_workflow_execution_initiated_event_attributes"
        ):
            attributes = event.start_child_workflow_execution_initiated_event_attributes
            value = attributes.workflow_id if field == "id" else attributes.workflow_type.name
        elif what == "local activity" and marker_name(event) == LOCAL_ACTIVITY_MARKER:
            value = marker_data(event).get("activity_id" if field == "id" else "activity_type")
        else:
            continue
        if value == recorded:
            found.append(event)
    unique = found[:1] if field == "id" else found
    return unique[0] if len(unique) == 1 else None


def patch_marker(history: WorkflowHistory, patch: str) -> HistoryEvent | None:
    return next(
        (e for e in history.events if marker_name(e) == PATCH_MARKER and patch_id(e) == patch),
        None,
    )


def marker_name(event: HistoryEvent) -> str | None:
    if not event.HasField("marker_recorded_event_attributes"):
        return None
    return event.marker_recorded_event_attributes.marker_name


def marker_data(event: HistoryEvent) -> dict:
    """A core marker's own JSON payload (the core writes it plain, never encoded)."""
    details = event.marker_recorded_event_attributes.details
    for key in ("patch-data", "data"):
        if key in details and details[key].payloads:
            try:
                value = json.loads(details[key].payloads[0].data)
            except ValueError:
                return {}
            return value if isinstance(value, dict) else {}
    return {}


def patch_id(event: HistoryEvent) -> str | None:
    return marker_data(event).get("id")


def detail(event: HistoryEvent) -> str:
    """What the run did at `event`, in a few words: `activity llm:plan (request_model)`."""
    if event.HasField("activity_task_scheduled_event_attributes"):
        attributes = event.activity_task_scheduled_event_attributes
        return f"activity {attributes.activity_id} ({attributes.activity_type.name})"
    if event.HasField("start_child_workflow_execution_initiated_event_attributes"):
        attributes = event.start_child_workflow_execution_initiated_event_attributes
        return f"child workflow {attributes.workflow_id} ({attributes.workflow_type.name})"
    if event.HasField("timer_started_event_attributes"):
        return f"timer {event.timer_started_event_attributes.timer_id}"
    if marker_name(event) == PATCH_MARKER:
        return f"`workflow.patched({patch_id(event)!r})`"
    if marker_name(event) == LOCAL_ACTIVITY_MARKER:
        return f"local activity {marker_data(event).get('activity_id', '')}".rstrip()
    if event.HasField("upsert_workflow_search_attributes_event_attributes"):
        fields = event.upsert_workflow_search_attributes_event_attributes.search_attributes
        return f"search attributes {', '.join(sorted(fields.indexed_fields))}"
    return type_name(event)
