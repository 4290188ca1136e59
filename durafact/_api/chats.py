"""`/api/chats`: start a chat (the registered recipe that declares itself one, the
ready `ChatWorkflow`), send it a message (the update `send`, which returns the reply;
`steer: true` joins the turn being answered), stop the turn being answered (the update
`stop`), follow it as it is written (SSE of the workflow's stream), read its transcript
and memory: the operations of durafact/_service/chats.py.

The stream's event ids are the workflow stream's own offsets, which survive
continue-as-new: `Last-Event-ID: N` goes on from N + 1. Without one, a client starts
where the chat is now (or at `?offset=`).
"""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncIterator
from typing import Annotated

from fastapi import APIRouter, Depends, Header, Query
from sse_starlette import EventSourceResponse, ServerSentEvent

from durafact._api.errors import ApiError
from durafact._api.events import PING_SECONDS, offset_of
from durafact._api.feeds import CAUGHT_UP
from durafact._api.models import ChatStarted, SendMessage, StartChat
from durafact._api.services import Services, services
from durafact._service import chats
from durafact._service.chats import (
    MESSAGES_TOPIC,
    TOKENS_TOPIC,
    ChatInput,
    ChatReply,
    ChatSend,
    MemoryView,
    TranscriptPage,
)
from durafact._service.inputs import check_new_id, validated
from durafact._service.runs import describe

router = APIRouter(tags=["chats"])

EVENT_NAMES = {MESSAGES_TOPIC: "message", TOKENS_TOPIC: "token"}


@router.post("/chats", status_code=201, response_model=ChatStarted, summary="Start a chat")
async def start_chat(body: StartChat, s: Annotated[Services, Depends(services)]) -> ChatStarted:
    """A new conversation; `settings` are `ChatInput`'s fields (422 when they do not fit)."""
    if "carried" in body.settings:
        raise ApiError(400, "BadRequest", "settings.carried is what a chat carries, not a setting")
    settings = validated(ChatInput, body.settings, where="settings")
    chat_id = check_new_id(body.id) if body.id else f"chat-{uuid.uuid4().hex[:8]}"
    handle, _ = await chats.open_chat(
        s.client, s.settings, s.registry, chat_id, settings, attach=False
    )
    return ChatStarted(id=chat_id, run_id=(await handle.describe()).run_id)


@router.post(
    "/chats/{chat_id:path}/messages",
    response_model=ChatReply,
    summary="Send a message, get the reply",
    responses={409: {"description": "the chat refused the message"}},
)
async def send(
    chat_id: str, message: SendMessage, s: Annotated[Services, Depends(services)]
) -> ChatReply:
    """The update `send`: the reply, once written (it streams meanwhile). The same `id`
    again gets the first reply, never a second turn."""
    handle = await chats.running_chat(s.client, s.registry, chat_id)
    sent = ChatSend(text=message.text, id=message.id, steer=message.steer)
    return await chats.send_message(handle, sent)


@router.post(
    "/chats/{chat_id:path}/stop",
    response_model=ChatReply,
    summary="Stop the turn being answered",
    responses={409: {"description": "no turn is being answered"}},
)
async def stop(chat_id: str, s: Annotated[Services, Depends(services)]) -> ChatReply:
    """The update `stop`: the turn's model or tool calls are cancelled; its reply, which
    says `stopped`."""
    return await chats.stop_turn(await chats.running_chat(s.client, s.registry, chat_id))


@router.get(
    "/chats/{chat_id:path}/stream",
    summary="Messages and replies as they are written (SSE)",
    response_class=EventSourceResponse,
)
async def stream(
    chat_id: str,
    s: Annotated[Services, Depends(services)],
    offset: Annotated[int | None, Query(ge=0, description="where to start")] = None,
    last_event_id: Annotated[str | None, Header()] = None,
) -> EventSourceResponse:
    """Events `message` (a message, its reply, or why it failed) and `token` (a piece of
    a reply); `end` when the chat has ended."""
    await describe(s.client.get_workflow_handle(chat_id))  # 404 before the stream begins
    if last_event_id is not None:
        last = offset_of(last_event_id)
        if last is None:
            raise ApiError(400, "BadRequest", f"Last-Event-ID {last_event_id!r} is not ours")
        offset = last + 1
    elif offset is None:
        offset = await chats.stream_offset(s.client, chat_id)
    return EventSourceResponse(items(s, chat_id, offset), ping=PING_SECONDS)


async def items(s: Services, chat_id: str, offset: int) -> AsyncIterator[ServerSentEvent]:
    """The chat's feed from `offset` (or the oldest item the chat still holds)."""
    async for item in s.feeds.chat(chat_id):
        if item is CAUGHT_UP or item.offset < offset or item.topic not in EVENT_NAMES:
            continue
        data = json.dumps(item.data, ensure_ascii=False)
        yield ServerSentEvent(data, id=str(item.offset), event=EVENT_NAMES[item.topic])
    yield ServerSentEvent("{}", event="end")


@router.get("/chats/{chat_id:path}/transcript", response_model=TranscriptPage, summary="Transcript")
async def transcript(
    chat_id: str,
    s: Annotated[Services, Depends(services)],
    offset: Annotated[int, Query(ge=0)] = 0,
    limit: Annotated[int, Query(ge=1, le=1000)] = 200,
) -> TranscriptPage:
    """This run's messages from `offset` (numbered across runs; earlier ones are in the
    histories of earlier runs)."""
    return await chats.read(s.client, chat_id, chats.transcript, offset, limit)


@router.get(
    "/chats/{chat_id:path}/memory", response_model=MemoryView, summary="What the chat keeps"
)
async def memory(chat_id: str, s: Annotated[Services, Depends(services)]) -> MemoryView:
    """The window, the summaries or the digest, and the counters."""
    return await chats.read(s.client, chat_id, chats.memory)
