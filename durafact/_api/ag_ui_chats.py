"""An AG-UI chat run's events: the turn answering one message, from the chat's feed
(durafact/_api/feeds.py), as durafact/_api/ag_ui_events.py says them. Its reply streams
as `TEXT_MESSAGE_*` (a piece between two tool calls is a message of its own), its tool
calls as `TOOL_CALL_*`, a question still pending ends it with an interrupt, and a
resumed turn goes on after the questions it answered. A chat attached to without a
message is its transcript, as a `MESSAGES_SNAPSHOT`.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

from durafact._api.ag_ui_events import Encoder, Event, arguments_text, question_of
from durafact._api.ag_ui_runs import questions_now, state
from durafact._api.feeds import CAUGHT_UP, merged
from durafact._api.services import Services
from durafact._core.llm import TextChunk
from durafact._service import chats
from durafact._service.chats import LINES_TOPIC, MESSAGES_TOPIC, TOKENS_TOPIC, ChatEvent, TurnLine
from durafact._service.errors import failure_text
from durafact._service.runs import Announcement, describe, queried_usage


async def chat_events(
    s: Services, encoder: Encoder, handle: Any, reply: Reply, update: Any
) -> AsyncIterator[Event]:
    """The turn `reply` follows; `update` is the `send` that asked for it (None: resumed)."""
    yield encoder.started()
    try:
        description = await describe(handle)
        yield encoder.snapshot(state(description, "chatting", await queried_usage(handle)))
        async for one in chat_stream(s, encoder, handle, reply, update):
            yield one
    except Exception as exc:
        yield encoder.error(failure_text(exc), code=type(exc).__name__)


@dataclass
class Reply:
    """The turn answering message `key` as it streams: the text sent of the current
    piece (the model's text between two tool calls), and the attempt writing it (a
    retried call writes again from the start: only what goes past what was sent is
    sent). A resumed stream skips the turn's items up to the questions `after` names:
    its client has them."""

    key: str
    after: set[str] = field(default_factory=set)
    piece: int = 0
    attempt: int | None = None
    written: str = ""
    sent: str = ""
    over: bool = False
    before: list[dict[str, Any]] = field(default_factory=list)  # the client's messages

    @property
    def message_id(self) -> str:
        return f"reply:{self.key}" if self.piece == 0 else f"reply:{self.key}:{self.piece}"

    def take(self, encoder: Encoder, chunk: TextChunk) -> list[Event]:
        if chunk.attempt != self.attempt:
            self.attempt, self.written = chunk.attempt, ""
        self.written += chunk.text
        if not self.written.startswith(self.sent) or len(self.written) == len(self.sent):
            return []
        delta, self.sent = self.written[len(self.sent) :], self.written
        return encoder.text(self.message_id, delta)

    def next_piece(self) -> None:
        if self.sent:
            self.piece += 1
        self.attempt, self.written, self.sent = None, "", ""

    def done(self, encoder: Encoder, said: Any) -> list[Event]:
        """The end of the reply, completed to the durable text `said` has; a snapshot
        with it when what was sent differs."""
        self.over = True
        text, result = said.text, {"id": self.key, "seq": said.seq, "text": said.text}
        if not self.sent:
            return [*encoder.whole_text(self.message_id, text), *encoder.finished(result)]
        if text.startswith(self.sent):
            rest = text[len(self.sent) :]
            events = encoder.text(self.message_id, rest) if rest else []
            return [*events, *encoder.finished(result)]
        events = encoder.text_end()
        if self.sent.strip() != text:
            for message in encoder.messages:
                if message["id"] == self.message_id:
                    message["content"] = text
            events.append(encoder.messages_snapshot(self.before))
        return [*events, *encoder.finished(result)]


async def chat_stream(
    s: Services, encoder: Encoder, handle: Any, reply: Reply, update: Any
) -> AsyncIterator[Event]:
    """The turn's items, from the chat's feed; when the feed does not hold the turn (a
    message answered long ago, sent again), the update's reply."""
    result = asyncio.ensure_future(update.result()) if update is not None else None
    if result is not None:  # a client that leaves cancels it: nothing to report then
        result.add_done_callback(lambda done: done.cancelled() or done.exception())
    seen, read_to, end = False, -1, None
    try:
        async for item in merged(s.feeds.chat(handle.id), result):
            if item is result:
                end = await chats.stream_offset(s.client, handle.id)
            elif item is not CAUGHT_UP:
                read_to = item.offset
                if item.data.get("key") != reply.key:
                    continue
                seen = True
                async for one in chat_item(encoder, reply, handle, item):
                    yield one
                if reply.over:
                    return
            if result is not None and end is not None and not seen and read_to + 1 >= end:
                for one in reply.done(encoder, result.result()):
                    yield one
                return
    finally:
        if result is not None:
            result.cancel()


async def chat_item(encoder: Encoder, reply: Reply, handle: Any, item: Any) -> AsyncIterator[Event]:
    """One item of the turn: a piece of its text, a line, or its end."""
    data = item.data
    if reply.after:  # what the resumed client has, up to the last question it answered
        asked = (
            question_of(TurnLine.model_validate(data).line) if item.topic == LINES_TOPIC else None
        )
        if asked is not None:
            reply.after.discard(asked.id)
        return
    if item.topic == TOKENS_TOPIC:
        for one in reply.take(encoder, TextChunk.model_validate(data)):
            yield one
    elif item.topic == LINES_TOPIC:
        line = TurnLine.model_validate(data).line
        for one in chat_line(encoder, reply, line):
            yield one
        asked = question_of(line)
        if asked is not None:
            pending = await questions_now(handle, asked)
            if any(q.id == asked.id for q in pending):
                reply.over = True
                for one in encoder.interrupted(pending):
                    yield one
    elif item.topic == MESSAGES_TOPIC:
        said = ChatEvent.model_validate(data)
        if said.kind == "error":
            reply.over = True
            for one in encoder.close():
                yield one
            yield encoder.error(said.text, code="TurnFailed")
        elif said.kind == "reply":
            for one in reply.done(encoder, said):
                yield one


def chat_line(encoder: Encoder, reply: Reply, line: Announcement) -> list[Event]:
    """A turn's line: tool calls and results as such (the reply's next piece follows
    them), anything else as a `durafact.line`; a chat's status is no step."""
    data = line.data or {}
    if line.kind == "action" and "tool_call" in data:
        reply.next_piece()
        return encoder.tool_call(data["tool_call"])
    if line.kind == "observation" and "tool_result" in data:
        return encoder.tool_result(data["tool_result"])
    return [encoder.said(line)]


async def transcript_events(encoder: Encoder, handle: Any) -> AsyncIterator[Event]:
    """A chat attached to without a message: its transcript as a snapshot."""
    yield encoder.started()
    try:
        page = await chats.transcript(handle)
    except Exception as exc:
        yield encoder.error(failure_text(exc), code=type(exc).__name__)
        return
    yield encoder.messages_snapshot(
        [message for line in page.lines for message in [transcript_message(line)] if message]
    )
    for one in encoder.finished():
        yield one


def transcript_message(line: Any) -> dict[str, Any] | None:
    base = {"id": f"msg:{line.seq}", "role": line.role}
    if line.role == "tool":
        return {**base, "toolCallId": line.tool_call_id or "", "content": line.content}
    if line.role == "assistant" and line.tool_calls:
        calls = [
            {
                "id": call.id,
                "type": "function",
                "function": {"name": call.name, "arguments": arguments_text(call.arguments)},
            }
            for call in line.tool_calls
        ]
        return {**base, "toolCalls": calls, **({"content": line.content} if line.content else {})}
    return {**base, "content": line.content}
