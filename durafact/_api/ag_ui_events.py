"""AG-UI's events (protocol 1.0) for what a run or a chat says, and how they go on the
wire (`stream`): translation only, no Temporal, so that every stream of
durafact/_api/ag_ui_runs.py and ag_ui_chats.py says the same thing the same way.

One `Encoder` per stream. It keeps what the protocol makes a stream keep: the step that
is open (each recipe status is a step: a new status finishes the one before and starts
its own), the text message being written, and the messages the stream made (for a
`MESSAGES_SNAPSHOT`). A line of the run becomes:

- `status` (or any line whose status differs from the open step's): `STEP_FINISHED`
  and `STEP_STARTED`;
- `action` (data `tool_call`): `TOOL_CALL_START`, `TOOL_CALL_ARGS` (the arguments as
  JSON text), `TOOL_CALL_END`;
- `observation` (data `tool_result`): `TOOL_CALL_RESULT`, with the artifact id and
  `ok` in its metadata;
- anything else (progress, a warning, an answer to a question, a question no longer
  pending): `CUSTOM` named `durafact.line`, its value the line.

Ids are the run's own, so a stream and a later snapshot name the same message: a tool
call's assistant message is the call's id (what `@ag-ui/client` makes of a
`TOOL_CALL_START` without a parent), its result `result:{call}`, a run's answer
`answer:{run id}`, a chat's reply `reply:{message id}`.
"""

from __future__ import annotations

import json
import time
from collections import Counter
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

from sse_starlette import EventSourceResponse

from durafact._api.events import PING_SECONDS
from durafact._core.approval import ApprovalQuestion
from durafact._core.ledger import Ledger
from durafact._core.llm import Usage
from durafact._service.runs import Announcement

PROTOCOL_VERSION = "1.0"
LINE_EVENT = "durafact.line"
# What answers an interrupt: `RunAgentInput.resume[].payload` (a `cancelled` entry rejects).
ANSWER_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "approved": {"type": "boolean"},
        "reason": {"type": "string"},
        "remember": {"type": "string", "description": "a tool question's scope: call, tool"},
        "changes": {"type": "object", "additionalProperties": {"type": "string"}},
    },
    "required": ["approved"],
}

Event = dict[str, Any]


def event(kind: str, **fields: Any) -> Event:
    return {"type": kind, "timestamp": int(time.time() * 1000), **fields}


def arguments_text(arguments: Any) -> str:
    """A tool call's arguments as the protocol carries them: JSON text (kept as written
    when the model's were not an object)."""
    return arguments if isinstance(arguments, str) else json.dumps(arguments, ensure_ascii=False)


def usage_view(usage: Usage | None) -> dict[str, Any] | None:
    if usage is None:
        return None
    return {
        "prompt_tokens": usage.prompt_tokens,
        "completion_tokens": usage.completion_tokens,
        "total_tokens": usage.total_tokens,
        "cached_tokens": usage.cached_tokens,
        "cost": None if usage.cost is None else str(usage.cost),
        "currency": usage.currency,
    }


def token_usage(usage: Usage | None) -> list[dict[str, int]]:
    """A run's usage as `RUN_FINISHED.usage`: one entry (the run's calls added up)."""
    if usage is None or not usage.total_tokens:
        return []
    return [
        {
            "inputTokens": usage.prompt_tokens,
            "outputTokens": usage.completion_tokens,
            "totalTokens": usage.total_tokens,
            "cachedInputTokens": usage.cached_tokens,
        }
    ]


def ledger_view(ledger: Ledger | None) -> dict[str, int] | None:
    """The ledger summary the state carries: how many artifacts of each type."""
    if ledger is None:
        return None
    return dict(sorted(Counter(artifact.type for artifact in ledger.all()).items()))


def interrupt(question: ApprovalQuestion) -> dict[str, Any]:
    found: dict[str, Any] = {
        "id": question.id,
        "reason": "tool_approval" if question.tool else "approval",
        "message": question.text,
        "responseSchema": ANSWER_SCHEMA,
        "metadata": {"durafact": question.model_dump(mode="json")},
    }
    if question.tool_call_id:
        found["toolCallId"] = question.tool_call_id
    return found


@dataclass
class Encoder:
    """The events of one AG-UI run (`thread_id` the workflow id, `run_id` the client's)."""

    thread_id: str
    run_id: str
    step: str | None = None
    state: dict[str, Any] = field(default_factory=dict)
    messages: list[dict[str, Any]] = field(default_factory=list)
    _text: str | None = None  # the id of the text message being written
    _tool_calls: dict[str, dict[str, Any]] = field(default_factory=dict)

    # --- the run ----------------------------------------------------------------------

    def started(self) -> Event:
        return event(
            "RUN_STARTED",
            threadId=self.thread_id,
            runId=self.run_id,
            protocolVersion=PROTOCOL_VERSION,
        )

    def finished(self, result: Any = None, usage: Usage | None = None) -> list[Event]:
        extra: dict[str, Any] = {}
        if result is not None:
            extra["result"] = result
        if spent := token_usage(usage):
            extra["usage"] = spent
        return [*self.close(), self._finished(**extra)]

    def cancelled(self) -> list[Event]:
        return [*self.close(), self._finished(outcome={"type": "cancelled"})]

    def interrupted(self, questions: list[ApprovalQuestion]) -> list[Event]:
        outcome = {"type": "interrupt", "interrupts": [interrupt(q) for q in questions]}
        return [*self.close(), self._finished(outcome=outcome)]

    def error(self, message: str, code: str | None = None) -> Event:
        return event("RUN_ERROR", message=message, **({"code": code} if code else {}))

    def _finished(self, **fields: Any) -> Event:
        return event("RUN_FINISHED", threadId=self.thread_id, runId=self.run_id, **fields)

    def close(self) -> list[Event]:
        """What must end before the run does: the text being written, the open step."""
        events = self.text_end()
        if self.step is not None:
            events.append(event("STEP_FINISHED", stepName=self.step))
            self.step = None
        return events

    # --- state --------------------------------------------------------------------------

    def snapshot(self, state: dict[str, Any]) -> Event:
        self.state = dict(state)
        return event("STATE_SNAPSHOT", snapshot=self.state)

    def delta(self, **changes: Any) -> list[Event]:
        """A `STATE_DELTA` of the fields that changed (none: no event)."""
        patch = [
            {"op": "replace" if key in self.state else "add", "path": f"/{key}", "value": value}
            for key, value in changes.items()
            if self.state.get(key, ...) != value
        ]
        self.state.update(changes)
        return [event("STATE_DELTA", delta=patch)] if patch else []

    # --- lines --------------------------------------------------------------------------

    def line(self, line: Announcement) -> list[Event]:
        events = self.enter(line.status)
        data = line.data or {}
        if line.kind == "action" and "tool_call" in data:
            events += self.tool_call(data["tool_call"])
        elif line.kind == "observation" and "tool_result" in data:
            events += self.tool_result(data["tool_result"])
        elif line.kind != "status":
            events.append(self.said(line))
        return events

    def said(self, line: Announcement) -> Event:
        """A line no other event carries, as it is."""
        return event("CUSTOM", name=LINE_EVENT, value=line.model_dump(mode="json"))

    def enter(self, status: str) -> list[Event]:
        """The step of `status`: the open one finished first, when it is another."""
        if status == self.step:
            return []
        events = self.close()
        self.step = status
        return [*events, event("STEP_STARTED", stepName=status)]

    def tool_call(self, call: dict[str, Any]) -> list[Event]:
        call_id, name = str(call["id"]), str(call["name"])
        arguments = arguments_text(call.get("arguments", {}))
        events = self.text_end()
        events += [
            event("TOOL_CALL_START", toolCallId=call_id, toolCallName=name),
            event("TOOL_CALL_ARGS", toolCallId=call_id, delta=arguments),
            event("TOOL_CALL_END", toolCallId=call_id),
        ]
        self._tool_calls[call_id] = {"name": name, "arguments": arguments}
        self.messages.append(
            {
                "id": call_id,
                "role": "assistant",
                "toolCalls": [
                    {
                        "id": call_id,
                        "type": "function",
                        "function": {"name": name, "arguments": arguments},
                    }
                ],
            }
        )
        return events

    def tool_result(self, result: dict[str, Any]) -> list[Event]:
        call_id = str(result["id"])
        message: dict[str, Any] = {
            "id": f"result:{call_id}",
            "role": "tool",
            "toolCallId": call_id,
            "content": str(result.get("text", "")),
        }
        metadata = {"durafact": {"ok": result.get("ok"), "artifact": result.get("artifact")}}
        if result.get("ok") is False:
            message["error"] = message["content"]
        self.messages.append({**message, "metadata": metadata})
        return [
            *self.text_end(),
            event(
                "TOOL_CALL_RESULT",
                messageId=message["id"],
                toolCallId=call_id,
                content=message["content"],
                metadata=metadata,
            ),
        ]

    # --- text ---------------------------------------------------------------------------

    def text(self, message_id: str, delta: str) -> list[Event]:
        """A piece of the assistant's text message `message_id` (started when new)."""
        events: list[Event] = []
        if self._text != message_id:
            events += self.text_end()
            self._text = message_id
            self.messages.append({"id": message_id, "role": "assistant", "content": ""})
            events.append(event("TEXT_MESSAGE_START", messageId=message_id, role="assistant"))
        self.messages[-1]["content"] += delta
        events.append(event("TEXT_MESSAGE_CONTENT", messageId=message_id, delta=delta))
        return events

    def text_end(self) -> list[Event]:
        if self._text is None:
            return []
        ended, self._text = self._text, None
        return [event("TEXT_MESSAGE_END", messageId=ended)]

    def whole_text(self, message_id: str, text: str) -> list[Event]:
        """A text message written at once: start, its text, end."""
        return [*self.text(message_id, text), *self.text_end()]

    # --- snapshots ------------------------------------------------------------------------

    def messages_snapshot(self, before: list[dict[str, Any]] | None = None) -> Event:
        """The conversation: `before` (what came before this stream's own), then the
        messages this stream made."""
        return event("MESSAGES_SNAPSHOT", messages=[*(before or []), *self.messages])

    def replay(self, lines: list[Announcement]) -> None:
        """Take the messages of lines already said (no events: they go in a snapshot);
        the step is the last line's status."""
        for line in lines:
            data = line.data or {}
            if line.kind == "action" and "tool_call" in data:
                self.tool_call(data["tool_call"])
            elif line.kind == "observation" and "tool_result" in data:
                self.tool_result(data["tool_result"])


def question_of(line: Announcement) -> ApprovalQuestion | None:
    data = (line.data or {}).get("question") if line.kind == "question" else None
    return ApprovalQuestion.model_validate(data) if data else None


def stream(events: AsyncIterator[Event]) -> EventSourceResponse:
    """The events as Server-Sent Events, each one `data:` line of JSON."""

    async def frames() -> AsyncIterator[dict[str, str]]:
        async for one in events:
            yield {"data": json.dumps(one, ensure_ascii=False, separators=(",", ":"))}

    # `\n` ends lines: @ag-ui/client splits events on a blank line written "\n\n".
    return EventSourceResponse(frames(), ping=PING_SECONDS, sep="\n")
