"""An AG-UI run's events: a recipe run from its feed (durafact/_api/feeds.py), as
durafact/_api/ag_ui_events.py says them. A stream starts with `RUN_STARTED` and the
state; a run started now is followed from its first line; one attached to gets a
`MESSAGES_SNAPSHOT` of what it said so far (a closed one: all of it, its answer and its
end); a resumed one goes on after the question it answered. A question still pending
ends the stream with an interrupt; the run's end is its answer as text, then
`RUN_FINISHED` (`RUN_ERROR` for a failure, the `cancelled` outcome for a cancellation).
What a run used and its answer come with the feed's lines and its end, read once for
every stream that follows the run.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

from durafact._api.ag_ui_events import Encoder, Event, ledger_view, question_of, usage_view
from durafact._api.feeds import Answer, RunEnd
from durafact._api.services import Services
from durafact._core.approval import ApprovalQuestion
from durafact._core.ledger import Ledger
from durafact._core.llm import Usage
from durafact._service.errors import failure_text
from durafact._service.inputs import subject
from durafact._service.ledger import ledger_of
from durafact._service.runs import (
    Announcement,
    describe,
    is_running,
    pending_questions,
    progress_page,
    queried_usage,
)


@dataclass
class Follow:
    """Which run a stream follows, from which line (None: attach, with a snapshot)."""

    description: Any
    offset: int | None


async def run_events(s: Services, encoder: Encoder, follow: Follow) -> AsyncIterator[Event]:
    yield encoder.started()
    try:
        async for one in run_stream(s, encoder, follow):
            yield one
    except Exception as exc:  # the stream began: a failure is the protocol's RUN_ERROR
        yield encoder.error(failure_text(exc), code=type(exc).__name__)


async def run_stream(s: Services, encoder: Encoder, follow: Follow) -> AsyncIterator[Event]:
    description = follow.description
    handle = s.client.get_workflow_handle(description.id, run_id=description.run_id)
    if follow.offset == 0:  # started now: nothing to read yet
        yield encoder.snapshot(state(description))
        async for one in live(s, encoder, description, 0):
            yield one
        return
    if not is_running(description):  # closed: replayed whole, at once
        yield encoder.snapshot(state(description))
        async for one in replayed(s, encoder, handle, description):
            yield one
        return
    page = await progress_page(handle, 0)
    yield encoder.snapshot(
        state(
            description,
            page.status if page else None,
            await queried_usage(handle),
            await ledger_of(handle),
        )
    )
    offset = follow.offset
    if offset is None:  # attached: what it said so far, then what waits
        encoder.replay(page.events if page else [])
        yield encoder.messages_snapshot(await input_messages(s, handle, description))
        offset = page.next_offset if page else 0
        asked = await questions_now(handle)
        if asked:
            for one in encoder.interrupted(asked):
                yield one
            return
    async for one in live(s, encoder, description, offset):
        yield one


async def live(
    s: Services, encoder: Encoder, description: Any, offset: int
) -> AsyncIterator[Event]:
    """The run's lines from `offset` as they come, then its end; a run that continued as
    new is followed into the next one."""
    while True:
        handle = s.client.get_workflow_handle(description.id, run_id=description.run_id)
        feed = s.feeds.run(description.id, description.run_id, description.workflow_type, offset)
        async for item in feed:
            if isinstance(item, RunEnd):
                if item.state == "CONTINUED_AS_NEW":
                    break
                for one in ended(encoder, description, item, await item.answer()):
                    yield one
                return
            for one in encoder.line(item.line):
                yield one
            asked = question_of(item.line)
            if asked is not None:
                pending = await questions_now(handle, asked)
                if any(q.id == asked.id for q in pending):
                    for one in encoder.interrupted(pending):
                        yield one
                    return
            if item.line.status != encoder.state.get("status"):
                usage = usage_view(item.usage)
                for one in encoder.delta(status=item.line.status, usage=usage):
                    yield one
        description = await describe(s.client.get_workflow_handle(description.id))
        offset = 0


async def questions_now(
    handle: Any, asked: ApprovalQuestion | None = None
) -> list[ApprovalQuestion]:
    """What waits for a person now; when no worker says, the question just `asked`."""
    try:
        return await pending_questions(handle)
    except Exception:
        return [asked] if asked else []


def ended(encoder: Encoder, description: Any, end: RunEnd, answer: Answer) -> list[Event]:
    if end.state == "CANCELED":
        return encoder.cancelled()
    if end.state != "COMPLETED":
        failure = end.failure or f"the run ended {end.state}"
        return [*encoder.close(), encoder.error(failure, code=end.state)]
    usage = usage_of(end.result)
    return [
        *encoder.whole_text(f"answer:{description.run_id}", answer.text),
        *encoder.delta(usage=usage_view(usage), ledger=ledger_view(answer.ledger)),
        *encoder.finished(end.result, usage),
    ]


async def replayed(
    s: Services, encoder: Encoder, handle: Any, description: Any
) -> AsyncIterator[Event]:
    """A closed run for a late client: a snapshot of its messages, its answer included,
    then its end, from what the feed gives."""
    lines: list[Announcement] = []
    end: RunEnd | None = None
    feed = s.feeds.run(description.id, description.run_id, description.workflow_type, 0)
    async for item in feed:
        if isinstance(item, RunEnd):
            end = item
        else:
            lines.append(item.line)
    encoder.replay(lines)
    before = await input_messages(s, handle, description)
    if end is None:
        yield encoder.messages_snapshot(before)
        return
    answer = await end.answer()
    if end.state == "COMPLETED":
        encoder.messages.append(
            {"id": f"answer:{description.run_id}", "role": "assistant", "content": answer.text}
        )
    yield encoder.messages_snapshot(before)
    if lines:
        for one in encoder.delta(status=lines[-1].status):
            yield one
    if end.state == "COMPLETED":
        usage = usage_of(end.result)
        for one in encoder.delta(usage=usage_view(usage), ledger=ledger_view(answer.ledger)):
            yield one
        for one in encoder.finished(end.result, usage):
            yield one
    elif end.state == "CANCELED":
        for one in encoder.cancelled():
            yield one
    else:
        yield encoder.error(end.failure or f"the run ended {end.state}", code=end.state)


def state(
    description: Any,
    status: str | None = None,
    usage: Usage | None = None,
    ledger: Ledger | None = None,
) -> dict[str, Any]:
    """The state a stream starts with: the recipe's status, what the run used, and how
    many artifacts of each type its ledger holds (None: not read)."""
    return {
        "workflow_id": description.id,
        "run_id": description.run_id,
        "type": description.workflow_type,
        "status": status,
        "usage": usage_view(usage),
        "ledger": ledger_view(ledger),
    }


def usage_of(result: Any) -> Usage | None:
    found = result.get("usage") if isinstance(result, dict) else None
    try:
        return Usage.model_validate(found) if isinstance(found, dict) else None
    except ValueError:
        return None


async def input_messages(s: Services, handle: Any, description: Any) -> list[dict[str, Any]]:
    """What the run was asked, as the user message a late client sees first: its input's
    first text (from the history's first event); none when it cannot be read."""
    recipe = s.registry.get(description.workflow_type)
    if recipe is None or not recipe.inputs:
        return []
    try:
        async for first in handle.fetch_history_events(page_size=1):
            payloads = first.workflow_execution_started_event_attributes.input.payloads
            values = await s.client.data_converter.decode(payloads, list(recipe.inputs))
            text = subject(values[0])
            return [{"id": f"input:{description.run_id}", "role": "user", "content": text}]
    except Exception:  # a snapshot without it still says what the run did
        return []
    return []
