"""AG-UI (protocol 1.0): `POST /api/ag-ui/runs` and `POST /api/ag-ui/chats` take AG-UI's
`RunAgentInput` and answer with its events as Server-Sent Events, what `@ag-ui/client`'s
`HttpAgent` sends and reads. A thin front door: the runs are started and answered
through the service layer here, as the JSON API's are, and followed through the feeds
(durafact/_api/feeds.py) by durafact/_api/ag_ui_runs.py and ag_ui_chats.py, whose
events durafact/_api/ag_ui_events.py makes.

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

from typing import Annotated, Any, Literal

from fastapi import APIRouter, Depends
from pydantic import BaseModel, ConfigDict, Field
from sse_starlette import EventSourceResponse

from durafact._api.ag_ui_chats import Reply, chat_events, transcript_events
from durafact._api.ag_ui_events import Encoder, question_of, stream
from durafact._api.ag_ui_runs import Follow, run_events
from durafact._api.services import Services, services
from durafact._core.approval import ApprovalAnswer
from durafact._service import approvals as answering
from durafact._service import chats
from durafact._service.chats import ChatInput, ChatSend
from durafact._service.errors import Invalid, NotFound, Refused
from durafact._service.inputs import MAX_INPUT_DEPTH, check_sendable, depth, validated
from durafact._service.launch import (
    Launch,
    input_kind,
    launch_of_input,
    launch_of_text,
    registered_type,
    start_run,
)
from durafact._service.runs import describe, pending_questions, progress_page, running

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

    def dumped(self) -> list[dict[str, Any]]:
        return [message.model_dump() for message in self.messages]


def encoder_of(body: RunAgentInput) -> Encoder:
    return Encoder(body.thread_id, body.run_id)


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
        return stream(run_events(s, encoder_of(body), Follow(started.description, offset=0)))
    if body.resume:
        first = await answer(s, handle, body.resume)
        offset = await offset_after(handle, first)
        return stream(run_events(s, encoder_of(body), Follow(description, offset=offset)))
    return stream(run_events(s, encoder_of(body), Follow(description, offset=None)))


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
        reply = Reply(user.id, set(answered), before=body.dumped())
        return stream(chat_events(s, encoder_of(body), handle, reply, None))
    if user is None:
        return stream(transcript_events(encoder_of(body), handle))
    update = await chats.submit_message(handle, ChatSend(text=text_of(user), id=user.id))
    reply = Reply(user.id, before=body.dumped())
    return stream(chat_events(s, encoder_of(body), handle, reply, update))


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
    asked = [(line.seq, question_of(line)) for line in page.events]
    seqs = [seq for seq, question in asked if question and question.id in answered]
    return min(seqs) + 1 if seqs else page.next_offset
