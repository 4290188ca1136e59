"""The AI SDK's UI message stream (`x-vercel-ai-ui-message-stream: v1`), for `useChat`
with its `DefaultChatTransport`: `api: "/api/ai-sdk/chats"` for a chat, `"/api/ai-sdk/runs"`
for a recipe run (the workflow id is the SDK's chat id).

A thin encoder over the operations of durafact/_service/ and the feeds of
durafact/_api/feeds.py, which the JSON API and the console use too:

- POST with a user message last sends it with the chat's `send` update (its id is the
  SDK's message id, so a retried POST never makes a second turn), or starts the run
  (`type`, and `input` or the recipe's command argument from the message's text). The
  reply streams as text parts; each model call is a step (a retried call resets its
  step); tool calls and results are tool parts, with the artifact in `toolMetadata`;
  a run's status and other lines are `data-status` and `data-progress` parts, and its
  answer is text, as `durafact result` shows it (the feed's `RunEnd.answer()`).
- A question for a person is a tool approval request (`approvalId` is the question's
  id; another kind of question is a `data-question` part), and the stream ends there.
  POST with the assistant message last, holding the SDK's approval responses, answers
  them as `durafact approve` does and streams what follows.
- GET `.../{id}/stream` (`resume: true`) replays the reply in flight from its start
  (the transport's `resumeStreamIsReplay`), then follows it; 204 when none is.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Depends, Response
from fastapi.responses import StreamingResponse
from pydantic import BaseModel, ConfigDict, Field

from durafact._api.errors import ApiError
from durafact._api.feeds import CAUGHT_UP, Answer, RunEnd, RunLine, merged
from durafact._api.services import Services, services
from durafact._core.approval import ApprovalAnswer
from durafact._service import approvals as answering
from durafact._service import chats
from durafact._service.chats import LINES_TOPIC, MESSAGES_TOPIC, TOKENS_TOPIC, ChatInput, ChatSend
from durafact._service.errors import NotFound
from durafact._service.inputs import check_path_id, check_sendable, validated
from durafact._service.launch import (
    input_kind,
    launch_of_command,
    launch_of_input,
    registered_type,
    start_run,
)
from durafact._service.runs import describe, is_running

router = APIRouter(tags=["ai-sdk"])

HEADERS = {
    "x-vercel-ai-ui-message-stream": "v1",
    "Cache-Control": "no-cache",
    "X-Accel-Buffering": "no",  # a proxy must not hold the parts back
}
ANSWERED_BY = "the AI SDK"


class UIRequest(BaseModel):
    """The body `DefaultChatTransport` posts (its `body` option adds `type`, `input` or
    `settings`)."""

    model_config = ConfigDict(extra="allow")

    id: str = Field(description="The SDK's chat id: the chat's or the run's workflow id.")
    messages: list[dict[str, Any]] = Field(min_length=1)
    trigger: Literal["submit-message", "regenerate-message"] = "submit-message"
    messageId: str | None = None  # noqa: N815 (the SDK names it so)
    type: str | None = Field(default=None, description="A run: its registered workflow type.")
    input: Any = Field(default=None, description="A run: its input (else the message's text).")
    settings: dict[str, Any] = Field(
        default_factory=dict, description="A new chat: `ChatInput`'s fields."
    )


# --- chats --------------------------------------------------------------------------


@router.post("/ai-sdk/chats", summary="A chat, for useChat (UI message stream)")
async def chat(body: UIRequest, s: Annotated[Services, Depends(services)]) -> StreamingResponse:
    """A user message last: send it (the chat starts with `settings` if it does not
    run); the assistant message last: the approval responses it holds."""
    check_path_id(body.id)
    last = body.messages[-1]
    if last.get("role") == "user":
        sent = ChatSend(text=text_of(last), id=str(last.get("id") or "") or None)
        settings = validated(ChatInput, body.settings, where="settings")
        handle, _ = await chats.open_chat(s.client, s.settings, s.registry, body.id, settings)
        update = await chats.submit_message(handle, sent)
        return stream(chat_turn(s, body.id, sent.id or update.id, update))
    answers = approval_answers(last)
    key = (last.get("metadata") or {}).get("message")
    if not isinstance(key, str):
        raise ApiError(400, "BadRequest", "the assistant message has no durafact metadata")
    answered = await answer_approvals(s, body.id, answers)
    return stream(chat_turn(s, body.id, key, after=answered))


@router.get("/ai-sdk/chats/{chat_id:path}/stream", summary="Resume the latest reply")
async def resume_chat(chat_id: str, s: Annotated[Services, Depends(services)]) -> Response:
    """The latest turn from its start (the reply in flight, or the one that ended while
    the client was away), then as it goes on; 204 when the chat holds none. Its message
    id is the one the first stream gave, so the client replaces what it has. A chat
    not started yet (a page's new id) has nothing to resume either."""
    try:
        await describe(s.client.get_workflow_handle(chat_id))
    except NotFound:
        return Response(status_code=204)
    key = await latest_turn(s, chat_id)
    if key is None:
        return Response(status_code=204)
    return stream(chat_turn(s, chat_id, key))


async def latest_turn(s: Services, chat_id: str) -> str | None:
    """The message whose turn the chat's stream holds last, if it holds one."""
    key = None
    async for item in s.feeds.chat(chat_id):
        if item is CAUGHT_UP:
            return key
        if item.topic == MESSAGES_TOPIC and item.data["kind"] == "user":
            key = item.data["key"]
    return None


async def chat_turn(
    s: Services, chat_id: str, key: str, update: Any = None, after: set[str] | None = None
) -> AsyncIterator[Any]:
    """The turn answering message `key`, from its start, or from after the questions
    `after` names (the client has the parts before them). When the stream no longer
    holds the turn (a message answered long ago, sent again), the update's reply."""
    parts = Parts(f"reply-{key}", {"chat": chat_id, "message": key}, resumed=bool(after))
    result = asyncio.ensure_future(update.result()) if update is not None else None
    if result is not None:  # a client that leaves cancels it: nothing to report then
        result.add_done_callback(lambda done: done.cancelled() or done.exception())
    seen, read_to, end = False, -1, None
    try:
        async for item in merged(s.feeds.chat(chat_id), result):
            if item is result:
                end = await chats.stream_offset(s.client, chat_id)
            elif item is not CAUGHT_UP:
                read_to = item.offset
                if item.data.get("key") != key:
                    continue
                seen = True
                if after:  # skip what the client has, up to the last question it answered
                    question = ((item.data.get("line") or {}).get("data") or {}).get("question")
                    after = after - {question["id"]} if question else after
                    continue
                yield parts.chat_item(item)
                if parts.finished:
                    return
            if end is not None and not seen and read_to + 1 >= end:
                yield [parts.start(), *parts.text(result.result().text), *parts.ending("stop")]
                return
    finally:
        if result is not None:
            result.cancel()


# --- runs ---------------------------------------------------------------------------


@router.post("/ai-sdk/runs", summary="A recipe run, for useChat (UI message stream)")
async def run(body: UIRequest, s: Annotated[Services, Depends(services)]) -> StreamingResponse:
    """A user message last: start the run of `type` (its `input`, else its command's
    argument from the message's text) with the SDK's chat id as its id; the assistant
    message last: the approval responses it holds, then what follows."""
    check_path_id(body.id)
    last = body.messages[-1]
    if last.get("role") == "user":
        if body.type is None:
            raise ApiError(400, "BadRequest", "a run needs `type`: a registered workflow type")
        recipe = registered_type(s.registry, body.type)
        if body.input is not None:
            launch = launch_of_input(recipe, input_kind(recipe, True, "input"), body.input, "input")
        elif recipe.command is not None:
            launch = launch_of_command(recipe, {recipe.command.argument: text_of(last)})
        else:
            raise ApiError(400, "BadRequest", f"{recipe.name} takes `input`: it has no command")
        check_sendable(launch.args)
        started = await start_run(
            s.client, s.settings, launch, body.id, attach=False, started_by=ANSWERED_BY
        )
        return stream(run_stream(s, body.id, started.run_id, recipe.name))
    answered = await answer_approvals(s, body.id, approval_answers(last))
    description = await describe(s.client.get_workflow_handle(body.id))
    return stream(run_stream(s, body.id, description.run_id, description.workflow_type, answered))


@router.get("/ai-sdk/runs/{workflow_id:path}/stream", summary="Resume a run's stream")
async def resume_run(workflow_id: str, s: Annotated[Services, Depends(services)]) -> Response:
    """The run's stream from its start while it runs; 204 once it has closed."""
    description = await describe(s.client.get_workflow_handle(workflow_id))
    if not is_running(description):
        return Response(status_code=204)
    return stream(run_stream(s, workflow_id, description.run_id, description.workflow_type))


async def run_stream(
    s: Services, workflow_id: str, run_id: str, workflow_type: str, after: set[str] | None = None
) -> AsyncIterator[dict[str, Any]]:
    parts = Parts(f"run-{run_id}", {"run": workflow_id, "run_id": run_id}, resumed=bool(after))
    async for item in s.feeds.run(workflow_id, run_id, workflow_type):
        if after and not isinstance(item, RunEnd):
            question = (item.line.data or {}).get("question")
            if question and question["id"] in after:
                after = after - {question["id"]}
            continue
        chunks = (
            parts.run_end(item, await item.answer())
            if isinstance(item, RunEnd)
            else parts.run_line(item)
        )
        for chunk in chunks:
            yield chunk
        if parts.finished:
            return


# --- what both share ----------------------------------------------------------------


def approval_answers(message: dict[str, Any]) -> list[ApprovalAnswer]:
    """The approval responses the assistant `message` holds, as answers, each checked
    before any is sent: the question it answers and `approved` as a JSON boolean (a gate
    never reads "false" or 0 as a yes)."""
    responses = [
        part["approval"]
        for part in message.get("parts") or []
        if isinstance(part, dict)
        and part.get("state") == "approval-responded"
        and isinstance(part.get("approval"), dict)
    ]
    if not responses:
        raise ApiError(
            400,
            "BadRequest",
            "the last message is neither a user message nor holds an approval response",
        )
    answers = []
    for response in responses:
        question, approved, reason = (response.get(k) for k in ("id", "approved", "reason"))
        if not isinstance(question, str) or not question:
            raise ApiError(400, "BadRequest", "an approval response needs the id it answers")
        if not isinstance(approved, bool):
            raise ApiError(
                400,
                "BadRequest",
                f"the approval response to {question} needs approved: true or false",
            )
        if reason is not None and not isinstance(reason, str):
            raise ApiError(
                400, "BadRequest", f"the approval response to {question}: reason is text"
            )
        answers.append(
            ApprovalAnswer(
                question_id=question, approved=approved, reason=reason or "", by=ANSWERED_BY
            )
        )
    return answers


async def answer_approvals(
    s: Services, workflow_id: str, answers: list[ApprovalAnswer]
) -> set[str]:
    """Each of `answers` given by the update `decide` (as `durafact approve --question`
    does): the ids answered."""
    for answer in answers:
        await answering.decide(s.client, s.registry, workflow_id, answer)
    return {str(answer.question_id) for answer in answers}


def text_of(message: dict[str, Any]) -> str:
    text = "".join(
        part.get("text", "") for part in message.get("parts") or [] if part.get("type") == "text"
    )
    if not text.strip():
        raise ApiError(400, "BadRequest", "the user message has no text part")
    return text


class Parts:
    """The chunks of one assistant message, as its items arrive."""

    def __init__(self, message_id: str, metadata: dict[str, Any], resumed: bool = False) -> None:
        self.message_id = message_id
        self.metadata = metadata
        self.started = resumed  # a message the client already has goes on without `start`
        self.finished = False
        self.step = False
        self.text_id: str | None = None
        self.texts = 0
        self.attempt = 0

    def start(self) -> dict[str, Any]:
        self.started = True
        return {"type": "start", "messageId": self.message_id, "messageMetadata": self.metadata}

    def opening(self) -> list[dict[str, Any]]:
        chunks = [] if self.started else [self.start()]
        if not self.step:
            self.step = True
            chunks.append({"type": "start-step"})
        return chunks

    def close_text(self) -> list[dict[str, Any]]:
        if self.text_id is None:
            return []
        done, self.text_id = self.text_id, None
        return [{"type": "text-end", "id": done}]

    def close_step(self) -> list[dict[str, Any]]:
        chunks = self.close_text()
        if self.step:
            self.step = False
            chunks.append({"type": "finish-step"})
        return chunks

    def text(self, delta: str, whole: bool = False) -> list[dict[str, Any]]:
        chunks = self.opening()
        if self.text_id is None:
            self.texts += 1
            self.text_id = f"text-{self.texts}"
            chunks.append({"type": "text-start", "id": self.text_id})
        if delta:
            chunks.append({"type": "text-delta", "id": self.text_id, "delta": delta})
        return chunks + (self.close_text() if whole else [])

    def finish(self, reason: str | None = None) -> dict[str, Any]:
        self.finished = True
        return {"type": "finish", **({"finishReason": reason} if reason else {})}

    def ending(self, reason: str | None = None) -> list[dict[str, Any]]:
        return [*self.opening(), *self.close_step(), self.finish(reason)]

    def line(self, line: dict[str, Any]) -> list[dict[str, Any]]:
        """A line with data: a tool part, an approval request, a question."""
        data = line.get("data") or {}
        if call := data.get("tool_call"):
            return [
                *self.opening(),
                *self.close_text(),
                {
                    "type": "tool-input-available",
                    "toolCallId": call["id"],
                    "toolName": call["name"],
                    "input": call["arguments"],
                    "dynamic": True,
                },
            ]
        if result := data.get("tool_result"):
            chunk: dict[str, Any] = {"toolCallId": result["id"], "dynamic": True}
            if result.get("artifact"):  # a run's `obs:` artifact (a chat keeps the message)
                chunk["toolMetadata"] = {"artifact": result["artifact"]}
            if result["ok"]:
                chunk |= {"type": "tool-output-available", "output": result["text"]}
            else:
                chunk |= {"type": "tool-output-error", "errorText": result["text"]}
            return [*self.opening(), chunk, *self.close_step()]
        if question := data.get("question"):
            if question.get("tool_call_id"):
                ask = {
                    "type": "tool-approval-request",
                    "approvalId": question["id"],
                    "toolCallId": question["tool_call_id"],
                }
            else:
                ask = {"type": "data-question", "id": question["id"], "data": question}
            return [*self.opening(), *self.close_text(), ask, *self.ending()]
        return []

    def chat_item(self, item: Any) -> list[dict[str, Any]]:
        data = item.data
        if item.topic == TOKENS_TOPIC:
            chunks: list[dict[str, Any]] = []
            if data["attempt"] > self.attempt and data["index"] == 0 and self.attempt:
                # A retried model call writes its reply again: its step starts over.
                chunks += [*self.close_text(), {"type": "reset-step"}]
                self.step = False
            self.attempt = data["attempt"]
            return chunks + self.text(data["text"])
        if item.topic == LINES_TOPIC:
            if (data["line"].get("data") or {}).get("tool_result"):
                self.attempt = 0  # the next model call's tokens start a new step
            return self.line(data["line"])
        if data["kind"] == "user":
            return [] if self.started else [self.start()]
        if data["kind"] == "error":
            return [
                *self.close_step(),
                {"type": "error", "errorText": data["text"]},
                self.finish("error"),
            ]
        # The reply: its text when none streamed (an endpoint that does not stream).
        chunks = [] if self.texts or self.text_id else self.text(data["text"])
        return chunks + self.ending("stop")

    def run_end(self, end: RunEnd, answer: Answer) -> list[dict[str, Any]]:
        if end.failure is not None:
            return [
                *self.opening(),
                *self.close_step(),
                {"type": "error", "errorText": end.failure},
                self.finish("error"),
            ]
        return [*self.text(answer.text, whole=True), *self.ending("stop")]

    def run_line(self, item: RunLine) -> list[dict[str, Any]]:
        line = item.line.model_dump(mode="json")
        if item.line.data:
            return self.line(line)
        kind = "data-status" if line["kind"] == "status" else "data-progress"
        part = {"type": kind, "data": {k: line[k] for k in ("seq", "kind", "message", "status")}}
        return [*self.opening(), part]


def stream(chunks: AsyncIterator[Any]) -> StreamingResponse:
    async def body() -> AsyncIterator[str]:
        async for chunk in chunks:
            for one in chunk if isinstance(chunk, list) else [chunk]:
                yield f"data: {json.dumps(one, ensure_ascii=False)}\n\n"
        yield "data: [DONE]\n\n"

    return StreamingResponse(body(), media_type="text/event-stream", headers=HEADERS)
