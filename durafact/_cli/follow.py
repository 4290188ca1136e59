"""Following a workflow from the command line: live progress, then its result.

`wait_and_print` polls the recipe's `progress` query and prints each announcement
as one line while it waits for the result; it warns at once (on stderr) when no
worker polls the task queue, so a workflow nobody runs never looks merely slow, and
says what holds the run (an activity being retried, a workflow task that keeps
failing: durafact/_service/troubles.py) as soon as the workflow's description shows it.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Sequence
from datetime import timedelta
from typing import Any

from temporalio.client import WorkflowFailureError
from temporalio.exceptions import ActivityError, ApplicationError, RetryState

from durafact._cli.output import ANSWER_HINT, Failed, brief, emit_json, note, quoted, say
from durafact._cli.results import print_result
from durafact._core.text import indent, one_line
from durafact._runtime.connection import has_live_poller
from durafact._runtime.registry import Registered
from durafact._runtime.settings import Settings
from durafact._service.errors import failure_text
from durafact._service.ledger import cancellation_reason, ledger_of
from durafact._service.runs import (
    OVER_BUDGET_ERROR,
    POLL_INTERVAL,
    Announcement,
    progress_page,
)
from durafact._service.troubles import events_newest_first, span, troubles

# Announcements of a tool loop's turns (durafact/_recipes/react.py): one short line each,
# however long the thought, the arguments or the tool's output.
BRIEF_KINDS = frozenset({"thought", "action", "observation", "answer", "correction"})
BRIEF_WIDTH = 100


async def wait_and_print(
    client: Any,
    settings: Settings,
    handle: Any,
    description: Any,
    run_id: str,
    url: str,
    as_json: bool,
    recipe: Registered | None = None,
    before: Sequence[Announcement] = (),
) -> int:
    """Wait for the run's result, printing progress unless `as_json`; the result is
    decoded as `recipe`'s (the registered workflow's), else plain JSON, and shown as the
    recipe declares. `before`: what the run a resumed one resumes had announced (see
    ProgressFeed)."""
    running = description.status is not None and description.status.name == "RUNNING"
    if running:
        await warn_if_no_worker(client, settings, description.task_queue)
    result_type = recipe.result_type if recipe is not None else None
    handle = client.get_workflow_handle(handle.id, run_id=run_id, result_type=result_type)
    outcome = asyncio.ensure_future(handle.result())
    feed = None if as_json or not running else ProgressFeed(handle, before)
    # What holds the run (retries, a failing workflow task), beside the progress lines;
    # on stderr when stdout is the one JSON document.
    watch = TroubleFeed(client, handle, as_json) if running else None
    try:
        while not outcome.done():
            await asyncio.wait({outcome}, timeout=POLL_INTERVAL)
            if feed and not outcome.done():
                await feed.poll()
            if watch and not outcome.done():
                await watch.poll()
        if feed:
            await feed.poll(final=True)  # the announcements made since the last poll
        value = outcome.result()
    except WorkflowFailureError as exc:
        state = (await handle.describe()).status
        if as_json:
            emit_json(handle.id, run_id, state.name if state else "FAILED", None, url)
        if state is not None and state.name == "CANCELED":
            raise Failed(canceled_line(handle.id, await cancellation_reason(handle))) from None
        if isinstance(exc.cause, ApplicationError) and exc.cause.type == OVER_BUDGET_ERROR:
            raise Failed(
                f"workflow {handle.id} stopped {one_line(exc.cause.message)}; what it made: "
                f"durafact artifacts {quoted(handle.id)}"
            ) from None
        why = await gave_up(client, handle.id, run_id, exc)
        raise Failed(f"workflow {handle.id} failed: {failure_text(exc)}{why}") from None
    except asyncio.CancelledError:
        outcome.cancel()
        note(f"starter: stopped waiting; the workflow goes on: durafact result {quoted(handle.id)}")
        raise
    if as_json:
        emit_json(handle.id, run_id, "COMPLETED", value, url)
    else:
        shows = recipe is not None and recipe.shows_result
        print_result(recipe, value, handle.id, await ledger_of(handle) if shows else None)
        say(f"Web UI: {url}")
    return 0


def canceled_line(workflow_id: str, reason: str) -> str:
    """A cancelled run in one line: the reason it was given (the `cancellation`
    artifact) and where its artifacts are."""
    because = f": {one_line(reason)}" if reason else ""
    return (
        f"workflow {workflow_id} was canceled{because} "
        f"(what it did: durafact artifacts {quoted(workflow_id)})"
    )


async def warn_if_no_worker(client: Any, settings: Settings, task_queue: str) -> None:
    """One line on stderr when nobody will run the workflow, so it never looks stuck."""
    if not settings.temporal_address_explicit and (dead := dead_embedded_worker(task_queue)):
        note(dead)
        return
    try:
        polled = await has_live_poller(client, settings.temporal_namespace, task_queue)
    except Exception:
        return  # the check is a courtesy: never fail a run over it
    if not polled:
        note(
            f"starter: warning: no worker polls task queue {task_queue!r}, so nobody will run "
            "this workflow: run durafact-worker (or durafact up)"
        )


def dead_embedded_worker(task_queue: str) -> str | None:
    """The warning when the embedded stack's worker is not running: the server still
    lists a worker that died in the last minute or so as a poller; its pid file knows
    better."""
    from durafact._local.embedded import Embedded, is_our_process  # only with that stack

    worker = Embedded.from_env().piece("worker")
    recorded = worker.recorded()
    if recorded is None or is_our_process(*recorded):
        return None
    return (
        f"starter: warning: the embedded worker (pid {recorded[0]}) is not running "
        f"(see {worker.log_name}); unless another worker polls {task_queue!r}, nobody will "
        "run this workflow: run durafact up (or durafact-worker)"
    )


class ProgressFeed:
    """Polls the `progress` query and prints each new announcement as one line,
    labelled with the recipe status it was made under. A resumed run first replays
    what the run it resumes had announced (`before`): as long as its announcements are
    those, they are marked `(kept)`, done before, not again."""

    def __init__(self, handle: Any, before: Sequence[Announcement] = ()) -> None:
        self.handle = handle
        self.offset = 0
        self.before = [(a.kind, a.status, a.message) for a in before]

    async def poll(self, final: bool = False) -> None:
        """Print what was announced since the last poll. `final`: the run has ended,
        so an unanswered query leaves lines out for good: say so."""
        page = await progress_page(self.handle, self.offset)
        if page is None:
            if final:
                status = f"durafact status {quoted(self.handle.id)}"
                say(f"  (the last announcements were not read; they are in {status})")
            return
        for event in page.events:
            label = f"  [{event.status}] "
            kept = " (kept)" if self._kept(event) else ""
            if event.kind in BRIEF_KINDS:
                width = max(BRIEF_WIDTH - len(label) - len(kept), 40)
                say(label + brief(event.message, width) + kept)
            else:
                say(indent(event.message + kept, label))
            if event.kind == "question" and not kept:
                # Once per question: a person must act before the workflow goes on.
                say(
                    f"  waiting for a person: durafact approve {quoted(self.handle.id)} "
                    f"{ANSWER_HINT}"
                )
        self.offset = page.next_offset

    def _kept(self, event: Announcement) -> bool:
        same = event.seq < len(self.before)
        if same and self.before[event.seq] == (event.kind, event.status, event.message):
            return True
        self.before = []  # the runs parted: everything from here on happens now
        return False


class TroubleFeed:
    """Prints what holds a running workflow (durafact/_service/troubles.py), each thing once: every
    new attempt of a retried activity, every distinct failure of its workflow task."""

    EVERY = 1.0  # seconds between descriptions: a retry's backoff is at least that

    def __init__(self, client: Any, handle: Any, to_stderr: bool) -> None:
        self.client = client
        self.handle = handle
        self.to_stderr = to_stderr
        self.seen: set[tuple[Any, ...]] = set()
        self.last = 0.0

    async def poll(self) -> None:
        now = asyncio.get_running_loop().time()
        if now - self.last < self.EVERY:
            return
        self.last = now
        try:
            found = await troubles(self.client, await self.handle.describe())
        except Exception:
            return  # a courtesy beside the result: never fail the wait over it
        for trouble in found:
            if trouble.key in self.seen:
                continue
            self.seen.add(trouble.key)
            if self.to_stderr:
                note(f"starter: workflow {self.handle.id}: {trouble.line}")
            else:
                say(f"  ! {trouble.line}")


async def gave_up(client: Any, workflow_id: str, run_id: str, exc: WorkflowFailureError) -> str:
    """When an activity's retries ran into its deadline: which one, how long that was,
    and how to go on; else nothing."""
    cause: BaseException | None = exc.cause
    while cause is not None and not isinstance(cause, ActivityError):
        cause = cause.__cause__  # e.g. a child workflow's failure
    if cause is None or cause.retry_state != RetryState.TIMEOUT:
        return ""
    deadline = ""
    if cause is exc.cause:  # the run's own activity: its deadline is in this history
        with contextlib.suppress(Exception):
            timeout = await scheduled_deadline(
                client, workflow_id, run_id, cause.scheduled_event_id
            )
            deadline = f" of {span(timeout)}"
    return (
        f" ({cause.activity_id} was retried until its deadline{deadline} passed; once the "
        f"cause is fixed: durafact resume {quoted(workflow_id)})"
    )


async def scheduled_deadline(
    client: Any, workflow_id: str, run_id: str, event_id: int
) -> timedelta:
    """The schedule-to-close timeout of the activity scheduled by history event `event_id`."""
    async for event in events_newest_first(client, workflow_id, run_id):
        if event.event_id == event_id:
            attributes = event.activity_task_scheduled_event_attributes
            return attributes.schedule_to_close_timeout.ToTimedelta()
    raise LookupError(f"no event {event_id}")
