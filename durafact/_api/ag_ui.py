"""AG-UI (protocol 1.0): `POST /api/ag-ui/runs` and `POST /api/ag-ui/chats` take AG-UI's
`RunAgentInput` and answer with its events as Server-Sent Events, what `@ag-ui/client`'s
`HttpAgent` sends and reads. A thin front door: the runs are started, answered and
followed through the service layer and the feeds (durafact/_api/feeds.py), as the JSON
API's are, and the events are made by durafact/_api/ag_ui_events.py.

A thread is a workflow: `threadId` is its id. On `/runs`:

- a thread that names no workflow starts one: the recipe is `forwardedProps.recipe` (a
  registered type, `PlanExecuteWorkflow`, or its command, `plan`), its input
  `forwardedProps.input`, else the last user message as its command's text (as `durafact
  plan TEXT`); the stream follows it from its first line;
- a thread that names one attaches: `MESSAGES_SNAPSHOT` of what it said so far, then its
  lines as they come (a closed run is replayed from its lines and its end);
- `resume` answers the interrupts that ended the last stream (the `decide` update, as
  `durafact decide`: `resolved` with the payload `{approved, reason}`, `cancelled`
  rejects), and the stream goes on from the first question it answers.

On `/chats`, `threadId` is the chat (started when new, with `forwardedProps.settings` as
its `ChatInput`): the last user message is sent by the update `send` (its id is the
message's, so a POST sent again makes no second turn) and its reply streams as it is
written; without a user message the stream is a snapshot of the transcript.

A question for a person ends a stream with `RUN_FINISHED` whose outcome is `interrupt`
(the interrupt's id is the question's). Everything wrong with a request (its shape, an
unknown recipe, an input that does not fit, an interrupt that is not pending) is a 4xx
in the API's one error shape before any stream starts.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Depends
from pydantic import BaseModel, ConfigDict, Field, TypeAdapter
from sse_starlette import EventSourceResponse

from durafact._api.ag_ui_events import Encoder, Event, arguments_text, ledger_view, usage_view
from durafact._api.ai_sdk import merged  # the feed alongside an update's reply
from durafact._api.events import PING_SECONDS
from durafact._api.feeds import CAUGHT_UP, RunEnd
from durafact._api.services import Services, services
from durafact._core.approval import ApprovalAnswer, ApprovalQuestion
from durafact._core.ledger import Ledger
from durafact._core.llm import TextChunk, Usage
from durafact._service import approvals as answering
from durafact._service import chats
from durafact._service.chats import (
    LINES_TOPIC,
    MESSAGES_TOPIC,
    TOKENS_TOPIC,
    ChatEvent,
    ChatInput,
    ChatSend,
    TurnLine,
)
from durafact._service.errors import Invalid, NotFound, Refused, failure_text
from durafact._service.inputs import MAX_INPUT_DEPTH, check_sendable, depth, subject, validated
from durafact._service.launch import (
    Launch,
    input_kind,
    launch_of_input,
    launch_of_text,
    registered_type,
    start_run,
)
from durafact._service.ledger import ledger_of
from durafact._service.runs import (
    Announcement,
    describe,
    is_running,
    pending_questions,
    progress_page,
    queried_usage,
    running,
)

router = APIRouter(tags=["ag-ui"])
BY = "ag-ui"  # who answered, in the run's history


class Message(BaseModel):
    """One message of the conversation, as AG-UI sends it (only what is read is checked)."""

    model_config = ConfigDict(extra="allow")
    id: str = Field(min_length=1)
    role: str
    content: Any = None


class ResumeEntry(BaseModel):
    """An answer to one interrupt: `resolved` with `{approved, reason}`, or `cancelled`."""

    model_config = ConfigDict(populate_by_name=True)
    interrupt_id: str = Field(alias="interruptId", min_length=1)
    status: Literal["resolved", "cancelled"]
    payload: Any = None
    metadata: dict[str, Any] | None = None


class RunAgentInput(BaseModel):
    """AG-UI's request to run an agent (protocol 1.0)."""

    model_config = ConfigDict(populate_by_name=True)
    thread_id: str = Field(alias="threadId", min_length=1, description="the workflow id")
    run_id: str = Field(alias="runId", min_length=1)
    messages: list[Message]
    tools: list[Any] = Field(default_factory=list)
    context: list[Any] = Field(default_factory=list)
    state: Any = None
    forwarded_props: Any = Field(default=None, alias="forwardedProps")
    resume: list[ResumeEntry] | None = None
    protocol_version: str | None = Field(default=None, alias="protocolVersion")
    parent_run_id: str | None = Field(default=None, alias="parentRunId")

    def props(self) -> dict[str, Any]:
        return self.forwarded_props if isinstance(self.forwarded_props, dict) else {}

    def last_user(self) -> Message | None:
        return next((m for m in reversed(self.messages) if m.role == "user"), None)


STREAM_RESPONSES: dict[int | str, dict[str, Any]] = {
    200: {"content": {"text/event-stream": {}}, "description": "AG-UI events"},
    404: {"description": "the recipe is unknown, or a resumed thread names no workflow"},
    409: {"description": "an interrupt answered is not pending, or the message is refused"},
}


@router.post(
    "/ag-ui/runs",
    summary="AG-UI: start, attach to or resume a run (SSE)",
    response_class=EventSourceResponse,
    responses=STREAM_RESPONSES,
)
async def ag_ui_run(
    body: RunAgentInput, s: Annotated[Services, Depends(services)]
) -> EventSourceResponse:
    """`threadId` is the workflow: a new one starts `forwardedProps.recipe`, an existing
    one is attached to, and `resume` answers its questions first."""
    handle = s.client.get_workflow_handle(body.thread_id)
    description = await existing(handle)
    if description is None:
        if body.resume:
            raise NotFound(f"no workflow with id {body.thread_id!r} to resume")
        launch = launch_of_request(s, body)
        started = await start_run(
            s.client,
            s.settings,
            launch,
            launch.workflow_id(body.thread_id),
            attach=False,
            started_by="AG-UI",
        )
        return stream(run_events(s, body, Follow(started.description, offset=0)))
    if body.resume:
        first = await answer(s, handle, body.resume)
        offset = await offset_after(handle, first)
        return stream(run_events(s, body, Follow(description, offset=offset)))
    return stream(run_events(s, body, Follow(description, offset=None)))


@router.post(
    "/ag-ui/chats",
    summary="AG-UI: send a chat message, its reply streams (SSE)",
    response_class=EventSourceResponse,
    responses=STREAM_RESPONSES,
)
async def ag_ui_chat(
    body: RunAgentInput, s: Annotated[Services, Depends(services)]
) -> EventSourceResponse:
    """`threadId` is the chat (started when new); the last user message is sent, and
    `resume` answers the questions its turn asked."""
    handle = await chat_of(s, body)
    user = body.last_user()
    if body.resume:
        if user is None:
            raise Invalid("a resumed chat run needs the user message whose turn asked")
        answered = await answer(s, handle, body.resume)
        return stream(chat_events(s, body, handle, user.id, None, set(answered)))
    if user is None:
        return stream(transcript_events(body, handle))
    sent = ChatSend(text=text_of(user), id=user.id)
    update = await chats.submit_message(handle, sent)
    return stream(chat_events(s, body, handle, user.id, update, set()))


# --- what a request asks for ------------------------------------------------------------


async def existing(handle: Any) -> Any:
    """The workflow's description; None when no workflow has the id."""
    try:
        return await describe(handle)
    except NotFound:
        return None


def launch_of_request(s: Services, body: RunAgentInput) -> Launch:
    """The run a new thread starts: `forwardedProps.recipe` on `forwardedProps.input`, or
    on the last user message's text."""
    props = body.props()
    name = props.get("recipe")
    if not isinstance(name, str) or not name:
        raise Invalid(
            "a new thread names its recipe: forwardedProps.recipe, a registered type "
            f"({', '.join(s.registry.names())}) or its command"
        )
    recipe = s.registry.commands().get(name) or registered_type(s.registry, name)
    user = body.last_user()
    if "input" in props or user is None or recipe.command is None:
        where = "forwardedProps.input"
        if depth(props.get("input")) > MAX_INPUT_DEPTH:
            raise Invalid(f"{where} is nested more than {MAX_INPUT_DEPTH} deep")
        kind = input_kind(recipe, "input" in props, where=where)
        launch = launch_of_input(recipe, kind, props.get("input"), where=where)
    else:
        launch = launch_of_text(recipe, text_of(user))
    check_sendable(launch.args)
    return launch


def text_of(message: Message) -> str:
    """A message's text: its content, or its text parts joined."""
    content = message.content
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = [
            p.get("text", "") for p in content if isinstance(p, dict) and p.get("type") == "text"
        ]
        return "\n".join(parts)
    raise Invalid(f"message {message.id!r} holds no text")


async def chat_of(s: Services, body: RunAgentInput) -> Any:
    """The running chat `threadId` names, started when no workflow has the id."""
    if await existing(s.client.get_workflow_handle(body.thread_id)) is not None:
        return await chats.running_chat(s.client, s.registry, body.thread_id)
    settings = validated(ChatInput, body.props().get("settings", {}), "forwardedProps.settings")
    handle, _ = await chats.open_chat(
        s.client, s.settings, s.registry, body.thread_id, settings, attach=True
    )
    return handle


async def answer(s: Services, handle: Any, resume: list[ResumeEntry]) -> list[str]:
    """Answer each interrupt (the `decide` update) once all are known to be pending and
    every payload reads; the ids answered."""
    await running(handle)
    try:
        pending = {q.id for q in await pending_questions(handle)}
    except Exception as exc:
        raise answering.unread(handle.id, exc) from None
    for entry in resume:
        if entry.interrupt_id not in pending:
            waiting = ", ".join(sorted(pending)) or "none"
            raise Refused(
                f"interrupt {entry.interrupt_id!r} is not a pending question of workflow "
                f"{handle.id} (pending: {waiting})"
            )
    answers = [answer_of(entry) for entry in resume]
    for one in answers:
        await answering.decide(s.client, s.registry, handle.id, one)
    return [one.question_id or "" for one in answers]


def answer_of(entry: ResumeEntry) -> ApprovalAnswer:
    """A resume entry as an answer: `cancelled` rejects; `resolved` says `approved`."""
    payload = entry.payload if isinstance(entry.payload, dict) else {}
    where = f"resume payload of {entry.interrupt_id!r}"
    if entry.status == "resolved" and not isinstance(payload.get("approved"), bool):
        raise Invalid(f"{where} needs approved: true or false")
    unknown = sorted(set(payload) - {"approved", "reason", "remember", "changes"})
    if unknown:
        raise Invalid(
            f"{where}: {unknown[0]!r} is not a field (approved, reason, remember, changes)"
        )
    try:
        return ApprovalAnswer(
            question_id=entry.interrupt_id,
            approved=entry.status == "resolved" and payload["approved"],
            reason=payload.get("reason") or ("cancelled" if entry.status == "cancelled" else ""),
            changes=payload.get("changes") or {},
            by=BY,
            remember=payload.get("remember"),
        )
    except ValueError as exc:
        raise Invalid(f"{where}: {exc}") from None


async def offset_after(handle: Any, answered: list[str]) -> int:
    """Where a resumed stream goes on: after the first answered question's line (the
    line its last stream ended on)."""
    page = await progress_page(handle, 0)
    if page is None:
        return 0
    seqs = [
        line.seq for line in page.events if question_of(line) and question_of(line).id in answered
    ]
    return min(seqs) + 1 if seqs else page.next_offset


def question_of(line: Announcement) -> ApprovalQuestion | None:
    data = (line.data or {}).get("question") if line.kind == "question" else None
    return ApprovalQuestion.model_validate(data) if data else None


# --- a run's events ---------------------------------------------------------------------


@dataclass
class Follow:
    """Which run a stream follows, from which line (None: attach, with a snapshot)."""

    description: Any
    offset: int | None


def stream(events: AsyncIterator[Event]) -> EventSourceResponse:
    async def frames() -> AsyncIterator[dict[str, str]]:
        async for one in events:
            yield {"data": json.dumps(one, ensure_ascii=False, separators=(",", ":"))}

    # `\n` ends lines: @ag-ui/client splits events on a blank line written "\n\n".
    return EventSourceResponse(frames(), ping=PING_SECONDS, sep="\n")


async def run_events(s: Services, body: RunAgentInput, follow: Follow) -> AsyncIterator[Event]:
    encoder = Encoder(body.thread_id, body.run_id)
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
                async for one in ended(s, encoder, handle, description, item):
                    yield one
                return
            for one in encoder.line(item):
                yield one
            asked = question_of(item)
            if asked is not None:
                pending = await questions_now(handle, asked)
                if any(q.id == asked.id for q in pending):
                    for one in encoder.interrupted(pending):
                        yield one
                    return
            if item.status != encoder.state.get("status"):
                usage = usage_view(await queried_usage(handle))
                for one in encoder.delta(status=item.status, usage=usage):
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


async def ended(
    s: Services, encoder: Encoder, handle: Any, description: Any, end: RunEnd
) -> AsyncIterator[Event]:
    if end.state == "CANCELED":
        for one in encoder.cancelled():
            yield one
        return
    if end.state != "COMPLETED":
        for one in encoder.close():
            yield one
        yield encoder.error(end.failure or f"the run ended {end.state}", code=end.state)
        return
    ledger = await ledger_of(handle)
    for one in encoder.whole_text(
        f"answer:{description.run_id}", answer_text(s, description, end, ledger)
    ):
        yield one
    usage = usage_of(end.result)
    for one in encoder.delta(usage=usage_view(usage), ledger=ledger_view(ledger)):
        yield one
    for one in encoder.finished(end.result, usage):
        yield one


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
            lines.append(item)
    encoder.replay(lines)
    before = await input_messages(s, handle, description)
    ledger = None
    if end is not None and end.state == "COMPLETED":
        ledger = await ledger_of(handle)
        text = answer_text(s, description, end, ledger)
        encoder.messages.append(
            {"id": f"answer:{description.run_id}", "role": "assistant", "content": text}
        )
    yield encoder.messages_snapshot(before)
    if end is None:
        return
    if lines:
        for one in encoder.delta(status=lines[-1].status):
            yield one
    if end.state == "COMPLETED":
        usage = usage_of(end.result)
        for one in encoder.delta(usage=usage_view(usage), ledger=ledger_view(ledger)):
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


def answer_text(s: Services, description: Any, end: RunEnd, ledger: Any) -> str:
    """A completed run's answer as text: as its recipe shows it (`show_result`, with the
    ledger's texts), else its result as JSON."""
    recipe = s.registry.get(description.workflow_type)
    if recipe is not None and recipe.result_type is not None:
        with contextlib.suppress(Exception):  # a result of another shape: shown as JSON
            value = TypeAdapter(recipe.result_type).validate_python(end.result)
            shown = recipe.shown(value, ledger)
            if shown:
                return shown
    return json.dumps(end.result, ensure_ascii=False, indent=2)


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


# --- a chat's events --------------------------------------------------------------------


async def chat_events(
    s: Services, body: RunAgentInput, handle: Any, key: str, update: Any, after: set[str]
) -> AsyncIterator[Event]:
    encoder = Encoder(body.thread_id, body.run_id)
    yield encoder.started()
    try:
        description = await describe(handle)
        yield encoder.snapshot(state(description, "chatting", await queried_usage(handle)))
        async for one in chat_stream(s, body, encoder, handle, Reply(key, after), update):
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
    s: Services, body: RunAgentInput, encoder: Encoder, handle: Any, reply: Reply, update: Any
) -> AsyncIterator[Event]:
    """The turn's items, from the chat's feed; when the feed does not hold the turn (a
    message answered long ago, sent again), the update's reply."""
    reply.before = [m.model_dump() for m in body.messages]
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


async def transcript_events(body: RunAgentInput, handle: Any) -> AsyncIterator[Event]:
    """A chat attached to without a message: its transcript as a snapshot."""
    encoder = Encoder(body.thread_id, body.run_id)
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
