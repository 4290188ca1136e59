"""`GET /api/runs/{id}/events`: a run as Server-Sent Events, resumable.

What a recipe announces is already its story in order: every status change
(`set_status` announces it), every question asked and every answer are announcements,
numbered by the `progress(offset)` query. So one position says how far a client got:
an announcement's event id is `RUN_ID:N`, N the offset after it, and a client that
reconnects with `Last-Event-ID: RUN_ID:N` gets the announcements from N on: nothing
missed, nothing twice. The run id pins the run, so a run that continued as new (its
offsets start again at 0) is never mixed with the next one. When the run closes, the
announcements its last workflow task made are read (a worker answers for a closed
run), then one `end` event (`RUN_ID:end`) carries Temporal's status and the result or
the failure, and the stream ends; after it, a reconnect gets nothing.

Event names: `status`, `question` (with `questions`, those pending as it is sent),
`approval`, `progress` (everything else), and `end`.
"""

from __future__ import annotations

import json
import re
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Header
from sse_starlette import EventSourceResponse, ServerSentEvent

from durafact._api.errors import ApiError
from durafact._api.feeds import RunEnd
from durafact._api.services import Services, services
from durafact._service.runs import describe, pending_questions

router = APIRouter(tags=["runs"])

NAMED = {"status": "status", "question": "question", "approval": "approval"}
PING_SECONDS = 15  # a comment line this often keeps proxies from closing an idle stream
# An offset in an event id: ASCII digits that fit in 64 bits. `str.isdigit` also takes
# '²', and int() refuses more than 4,300 digits: neither may become a 500.
OFFSET = re.compile(r"[0-9]{1,18}")


@dataclass(frozen=True)
class Cursor:
    """How far a client got in one run: announcements before `offset`, or the end."""

    run_id: str | None = None
    offset: int = 0
    ended: bool = False

    @classmethod
    def parse(cls, last_event_id: str | None) -> Cursor:
        if not last_event_id:
            return cls()
        run_id, _, position = last_event_id.rpartition(":")
        if position == "end" and run_id:
            return cls(run_id, ended=True)
        offset = offset_of(position)
        if not run_id or offset is None:
            raise ApiError(400, "BadRequest", f"Last-Event-ID {last_event_id!r} is not one we sent")
        return cls(run_id, offset)


def offset_of(text: str) -> int | None:
    """The offset an event id holds; None when it holds none we could have sent."""
    return int(text) if OFFSET.fullmatch(text) else None


@router.get(
    "/runs/{workflow_id:path}/events",
    summary="Live progress, status, questions and the end (SSE)",
    response_class=EventSourceResponse,
)
async def events(
    workflow_id: str,
    s: Annotated[Services, Depends(services)],
    last_event_id: Annotated[str | None, Header()] = None,
) -> EventSourceResponse:
    """Server-Sent Events; reconnect with `Last-Event-ID` to go on where you were."""
    cursor = Cursor.parse(last_event_id)
    handle = s.client.get_workflow_handle(workflow_id, run_id=cursor.run_id)
    description = await describe(handle)  # 404 before the stream begins
    run = Cursor(description.run_id, cursor.offset, cursor.ended)
    return EventSourceResponse(stream(s, description, run), ping=PING_SECONDS)


async def stream(s: Services, description: Any, cursor: Cursor) -> AsyncIterator[ServerSentEvent]:
    if cursor.ended:
        return
    handle = s.client.get_workflow_handle(description.id, run_id=cursor.run_id)
    feed = s.feeds.run(description.id, cursor.run_id, description.workflow_type, cursor.offset)
    async for item in feed:
        if isinstance(item, RunEnd):
            yield sse(f"{cursor.run_id}:end", "end", item_end(item))
            return
        line = item.line
        data = line.model_dump(mode="json", exclude={"data"})
        if line.kind == "question":
            data["questions"] = await questions_now(handle)
        yield sse(f"{cursor.run_id}:{line.seq + 1}", NAMED.get(line.kind, "progress"), data)


async def questions_now(handle: Any) -> list[dict[str, Any]]:
    """The questions pending now; none when no worker answered."""
    try:
        return [q.model_dump(mode="json") for q in await pending_questions(handle)]
    except Exception:
        return []


def item_end(end: RunEnd) -> dict[str, Any]:
    data: dict[str, Any] = {"state": end.state}
    if end.failure is None:
        data["result"] = end.result
    else:
        data["failure"] = end.failure
    return data


def sse(event_id: str, name: str, data: dict[str, Any]) -> ServerSentEvent:
    return ServerSentEvent(json.dumps(data, ensure_ascii=False), id=event_id, event=name)
