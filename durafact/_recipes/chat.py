"""Chat: one long-lived workflow per conversation, bounded by a memory policy.

A message arrives by the update `send` (returns the reply; its validator refuses
an empty or oversized message before anything is written to history) or the
signal `message` (fire and forget). Messages queue in arrival order and the main
loop answers one at a time: a turn adds the user's message to the window, asks
the model (one `request_model` activity, `llm:chat:{turn}`; with tools, the
ReAct tool running of durafact/_recipes/react.py, up to `max_turns` model calls), adds
the reply, then lets the memory policy (durafact/_core/memory.py) fold the window: a
fold that needs text is one more model activity (`llm:summary:{round}` or
`llm:digest:{version}`), and a failed one falls back to truncated lines.

A message may carry an id (`ChatSend.id`; by default the update's id): the same
id again gets the first reply, never a second turn, also after continue-as-new and
however long ago it was sent. The carry holds the texts of the last
`REMEMBERED_REPLIES` replies and, for every id answered, 12 bytes (durafact/_core/answered.py);
an older reply is read from the run that wrote it: from this run's transcript, or
from an earlier run's by the activity `read_reply` (`read-reply:{seq}`), which asks that
closed run's `transcript` query. A repeated id that arrives by signal is dropped.

Stop and steer. The update `stop` cancels the turn being answered (its model call or
tool calls, through the activities' heartbeats): the turn ends `stopped`, its `send`
gets the reply `ChatReply(status="stopped")`, a tool call it cut short gets the
result "stopped by ...", and the next message is answered as usual. With no turn
being answered, or while the turn waits for a person's answer (a destructive tool's
approval, a budget question: answer that instead), its validator refuses it (nothing
is written to history). A message sent with `steer: true` while a turn is answered
joins that turn: it is added as "Note from a person: ..." before the turn's next
model call, and its `send` gets `status="steered"` ("steered turn N"). One that comes
after the turn's last model call, or when no turn runs, is an ordinary message. (The
update `steer` of every ReAct run is refused by a chat: a chat's note is such a
message.)

Continue-as-new. When the run's history passes `continue_after_events` or
`continue_after_bytes` (or the server suggests it), the chat detaches the
stream's pollers, keeps answering what is queued until every handler has
finished (an update that arrives meanwhile is answered in this run), and
continues as new carrying only `ChatCarry`: the memory (window, summaries,
digest, counters), recent replies by id, the index of answered ids, where each run
began, the stream's state, and the answers to tool questions remembered for the chat
(scopes `call` and `chat`; a `tool` one lasts for the run it was given in).

Versions. On workers of a deployment each run of the chat is pinned to the version it
started on; once a new version is current, the chat continues as new after the next
turn it answers (the server says so with the task that brings a message), and the next
run starts on the new version (durafact/_recipes/react_long.py, `next_run_options`). A
chat that gets no message stays where it is.

Streaming. With `stream` on, the model activity publishes the reply's text as it
is written to the topic `tokens` (`TextChunk`, keyed by the message id) of the
workflow's stream (`temporalio.contrib.workflow_streams`); the workflow itself
publishes each message and reply to `messages` (`ChatEvent`), and each line a turn
announces with data (a tool call, its result, a question, an answer) to `lines`
(`TurnLine`). The durable reply
is the activity's result either way; an endpoint that does not stream only
means no `tokens`.

Budget. A chat's `budget` (ChatInput, every recipe's) counts every run of the chain:
what earlier runs spent is carried. Spent with `fail`, the message being answered and
every queued one get the over-budget error, later ones are refused, and the chat ends
`over_budget`; with `ask`, the reply waits for the person's answer.

Queries: `transcript(offset, limit)` pages this run's messages (numbered across
runs; earlier ones are in earlier runs' histories), `memory` shows what is kept.
"""

from __future__ import annotations

import asyncio
from collections import deque
from dataclasses import dataclass
from datetime import timedelta
from typing import Literal

from pydantic import BaseModel, Field, field_validator
from temporalio import workflow
from temporalio.contrib.workflow_streams import WorkflowStream, WorkflowStreamState
from temporalio.exceptions import ActivityError, ApplicationError, is_cancelled_exception

from durafact._core.answered import Answered, ReplyLookup, reply_after
from durafact._core.ids import (
    CHAT_MESSAGES_PREFIX,
    DIGEST_ID,
    chat_call_id,
    chat_scope,
    digest_scope,
    reply_lookup_id,
    signal_message_key,
    summary_id,
    tool_call_id,
)
from durafact._core.ledger import Artifact
from durafact._core.llm import ArtifactSpan, ChatMessage, ChatTurn, StreamTo, Usage
from durafact._core.loop_context import ContextPolicy
from durafact._core.memory import (
    ChatLine,
    Fold,
    Memory,
    MemoryPolicy,
    RollingDigestSummarizer,
    TranscriptPage,
    render,
)
from durafact._core.react import truncate_observation
from durafact._core.steer import NOT_STEERED, steer_text
from durafact._core.tool_policy import RememberedDecision, travelling
from durafact._core.tools import ToolCall, checked_tool_names
from durafact._recipes.react import (
    ReAct,
    ReActSettings,
    _Run,
    announce_action,
    announce_observation,
)
from durafact._recipes.react_long import history_full, new_version, next_run_options
from durafact._recipes.recipe import Announcement, RecipeContext, reraise_cancellation
from durafact._recipes.tool_gate import hold_remembered, remembered

MESSAGES_TOPIC = "messages"
TOKENS_TOPIC = "tokens"
LINES_TOPIC = "lines"
INVALID_MESSAGE = "InvalidMessage"
TURN_FAILED = "ChatTurnFailed"
# Reply texts kept by message id for repeated sends, carried across continue-as-new;
# an older one is read back from the run that wrote it.
REMEMBERED_REPLIES = 32
READ_BACK_TIMEOUT = timedelta(seconds=30)
# What a stopped turn says: its reply, and the result of a tool call it cut short.
STOPPED_REPLY = "(stopped by a person before answering)"
STOPPED_CALL = "stopped by a person before the tool answered"


class ChatSend(BaseModel):
    """One user message for the `send` update (with `steer`, a note to the running turn)."""

    text: str
    id: str | None = Field(
        default=None,
        description="The message's id; the same id again gets the first reply (default: "
        "the update's id).",
    )
    steer: bool = Field(
        default=False,
        description="While a turn is being answered: add the message to that turn's "
        "conversation before its next model call instead of waiting for the next turn.",
    )


class ChatReply(BaseModel):
    """What the `send` update returns: the reply to one message, or why there is none."""

    id: str
    seq: int = Field(description="The number of the user's message in the conversation.")
    text: str
    run: int = Field(description="Continue-as-new runs before the one that answered.")
    status: Literal["answered", "stopped", "steered"] = Field(
        default="answered",
        description="`stopped`: a person stopped the turn (update `stop`) before the model "
        "answered; `steered`: the message went into a running turn, whose reply goes to "
        "the message that turn answers.",
    )
    steered: int | None = Field(
        default=None,
        description="A steered message: the number of the message whose turn it joined.",
    )


class ChatEvent(BaseModel):
    """What the topic `messages` carries: a message, its reply, or why it failed."""

    kind: Literal["user", "reply", "error"]
    key: str
    seq: int
    text: str


class TurnLine(BaseModel):
    """What the topic `lines` carries: a line a turn announced with data (a tool call,
    its result, a question, an answer), keyed by the message the turn answers."""

    key: str
    line: Announcement


class RunStart(BaseModel):
    """Where a run of the chain begins: its run id and the seq of its first message."""

    run_id: str
    first_seq: int


class ChatCarry(BaseModel):
    """Everything a chat carries across continue-as-new."""

    memory: Memory = Field(default_factory=Memory)
    turns: int = 0
    model_calls: int = 0
    runs: int = 0
    replies: dict[str, ChatReply] = Field(default_factory=dict)
    answered: Answered = Field(default_factory=Answered)
    starts: list[RunStart] = Field(default_factory=list)
    stream: WorkflowStreamState | None = None
    usage: Usage = Field(
        default_factory=Usage, description="What the earlier runs spent: the budget is the chat's."
    )
    remembered: list[RememberedDecision] = Field(
        default_factory=list,
        description="Answers to tool questions remembered for the chat (scopes `call`, `chat`).",
    )

    def run_of(self, seq: int) -> int | None:
        """The number of the run that holds message `seq` (None: unknown, a run before
        runs were recorded)."""
        earlier = [n for n, start in enumerate(self.starts) if start.first_seq <= seq]
        return self.runs - len(self.starts) + earlier[-1] + 1 if earlier else None


class ChatInput(ReActSettings):
    """A chat's settings (and, after continue-as-new, what it carries)."""

    protocol: Literal["native"] = "native"
    system: str = Field(
        default="You are a helpful assistant. Answer briefly and use what you remember "
        "of the conversation.",
        description="Who the assistant is.",
    )
    memory: MemoryPolicy = Field(default_factory=RollingDigestSummarizer)
    tools: list[str] = Field(default_factory=list, description="Worker tools it may use.")
    mcp_servers: list[str] = Field(default_factory=list)
    max_message_chars: int = Field(default=8000, ge=1, description="Longer messages are refused.")
    stream: bool = Field(default=True, description="Publish replies as they are written.")
    continue_after_events: int = Field(default=10_000, ge=100)
    continue_after_bytes: int = Field(default=10_000_000, ge=10_000)
    carried: ChatCarry | None = None

    @field_validator("tools", "mcp_servers")
    @classmethod
    def _names(cls, names: list[str]) -> list[str]:
        return checked_tool_names(names)

    @field_validator("context")
    @classmethod
    def _memory_bounds_a_chat(cls, policy: ContextPolicy) -> ContextPolicy:
        if policy.kind != "keep_all":
            raise ValueError(
                f"a chat keeps its conversation bounded with `memory`; the context policy "
                f"{policy.kind!r} is for tool loops (ReAct, PlanReAct)"
            )
        return policy


class MemoryView(BaseModel):
    policy: str
    memory: Memory
    runs: int
    turns: int


@dataclass
class _Pending:
    id: str
    text: str
    reply: ChatReply | None = None
    error: str | None = None
    done: bool = False
    answered_seq: int | None = None  # answered before, in the message `seq`


FOLD_SYSTEM = (
    "You keep the memory of a conversation. Rewrite the memory so far and the new "
    "messages as one short note: keep every fact, name, number and promise that may "
    "matter later; drop small talk. Plain text, no preamble."
)


@workflow.defn
class ChatWorkflow(ReAct[ChatInput, None]):
    """A conversation: `send` a message, get the reply; it lives as long as you talk."""

    recipe_name = "chat"
    remember_scopes = ("call", "tool", "chat")
    chat = True
    stoppable = True
    upgrade_on_continue_as_new = True

    @workflow.init
    def __init__(self, input: ChatInput) -> None:
        super().__init__()
        carried = input.carried or ChatCarry()
        self.stream = WorkflowStream(prior_state=carried.stream)
        self._input = input
        self._carry = carried.model_copy(update={"stream": None})
        self._turns_before = carried.turns
        self._carry.starts.append(
            RunStart(run_id=workflow.info().run_id, first_seq=carried.memory.next_seq)
        )
        self._memory = carried.memory
        self._transcript: list[ChatLine] = list(carried.memory.window)
        self._queue: deque[_Pending] = deque()
        self._queued: dict[str, _Pending] = {}
        self._signals = 0
        self._turn_start = 0
        # Why the chat is ending (its budget stopped it): every later message is refused.
        self._ended: str | None = None
        # The turn being answered, its task (what `stop` cancels) and the steer notes
        # that wait for its next model call.
        self._current: _Pending | None = None
        self._responding: asyncio.Task[str] | None = None
        self._stop_requested = False
        self._steering: list[_Pending] = []
        self._ctx.usage = carried.usage
        self._ctx.on_announce = self._publish_line
        self._sync_ledger()

    @workflow.run
    async def run(self, input: ChatInput) -> None:
        await self.execute(input)

    # --- messages in ----------------------------------------------------------------

    @workflow.update
    async def send(self, message: ChatSend) -> ChatReply:
        info = workflow.current_update_info()
        pending = self._enqueue(message, message.id or (info.id if info else ""))
        if pending.answered_seq is not None:
            return await self._read_back(pending.id, pending.answered_seq)
        await workflow.wait_condition(lambda: pending.done)
        if pending.reply is None:
            raise ApplicationError(pending.error or "no reply", type=TURN_FAILED)
        return pending.reply

    @send.validator
    def _validate_send(self, message: ChatSend) -> None:
        problem = self._problem(message)
        if problem:
            raise ApplicationError(problem, type=INVALID_MESSAGE, non_retryable=True)

    @workflow.signal
    def message(self, message: ChatSend) -> None:
        problem = self._problem(message)
        if problem:
            workflow.logger.warning("message dropped: %s", problem)
            return
        self._signals += 1
        self._enqueue(message, message.id or signal_message_key(self._carry.runs, self._signals))

    @workflow.update
    async def stop(self) -> ChatReply:
        """Stop the turn being answered: its model or tool calls are cancelled and it ends
        `stopped` (its `send` gets that reply); returns the turn's reply. The next
        message is answered as usual."""
        current = self._current
        assert current is not None and self._responding is not None  # the validator's
        self._stop_requested = True
        self._responding.cancel()
        await workflow.wait_condition(lambda: current.done)
        if current.reply is None:
            raise ApplicationError(current.error or "no reply", type=TURN_FAILED)
        return current.reply

    @stop.validator
    def _validate_stop(self) -> None:
        problem = None
        if self._responding is None:
            problem = "no turn is being answered: nothing to stop"
        elif waiting := self._ctx.pending_questions():
            # Cancelled, the wait would leave its question open with nobody to read the
            # answer: a person answers it instead (a rejection ends the call too).
            problem = f"the turn waits for a person's answer to {waiting[0].id}: answer it"
        if problem:
            raise ApplicationError(problem, type=NOT_STEERED, non_retryable=True)

    def steer_problem(self) -> str | None:
        return (
            "a chat takes a note as a message sent with steer: true (durafact steer ID NOTE "
            "sends one)"
        )

    def _problem(self, message: ChatSend) -> str | None:
        if self._ended is not None:
            return f"the chat has ended: {self._ended}"
        if not message.text.strip():
            return "the message is empty"
        limit = self._input.max_message_chars
        if len(message.text) > limit:
            return f"the message has {len(message.text)} characters; at most {limit} are taken"
        return None

    def _enqueue(self, message: ChatSend, key: str) -> _Pending:
        """The message's place in the queue, or what answered it already."""
        known = self._carry.replies.get(key)
        if known is not None:
            return _Pending(id=key, text=message.text, reply=known, done=True)
        seq = self._carry.answered.seq_of(key)
        if seq is not None:
            return _Pending(id=key, text=message.text, done=True, answered_seq=seq)
        if key in self._queued:
            return self._queued[key]
        pending = _Pending(id=key, text=message.text.strip())
        if message.steer and self._responding is not None:
            self._steering.append(pending)
        else:
            self._queue.append(pending)
        self._queued[key] = pending
        return pending

    # --- queries --------------------------------------------------------------------

    @workflow.query
    def transcript(self, offset: int = 0, limit: int = 50) -> TranscriptPage:
        lines = [line for line in self._transcript if line.seq >= offset][: max(limit, 0)]
        first = self._transcript[0].seq if self._transcript else self._memory.next_seq
        next_offset = lines[-1].seq + 1 if lines else max(offset, first)
        return TranscriptPage(
            lines=lines, first=first, next_offset=next_offset, total=self._memory.next_seq
        )

    @workflow.query
    def memory(self) -> MemoryView:
        return MemoryView(
            policy=self._input.memory.kind,
            memory=self._memory,
            runs=self._carry.runs,
            turns=self._carry.turns,
        )

    @workflow.query
    def context_messages(self, conversation: ArtifactSpan) -> list[ChatTurn]:
        """The window, for the model activity: it lives in the memory, not the ledger."""
        return [line.turn() for line in self._memory.window[: conversation.count]]

    # --- the loop -------------------------------------------------------------------

    async def lifecycle(self, ctx: RecipeContext, input: ChatInput) -> None:
        run = _Run(ctx, "chat", self.settings(input))
        hold_remembered(ctx.ledger, [*input.tool_policy.remembered, *self._carry.remembered])
        if input.tools or input.mcp_servers:
            run.specs = await self._list_tools(ctx, run, input)
        ctx.set_status("chatting", f"chat run {self._carry.runs}")
        while True:
            await workflow.wait_condition(lambda: bool(self._queue) or self._continues())
            if not self._queue:
                break
            await self._turn(ctx, input, run, self._queue.popleft())
        # Nothing new is polled on this run; what arrives while handlers finish is
        # still answered here, so nothing is lost or answered twice across the boundary.
        self.stream.detach_pollers()
        while True:
            await workflow.wait_condition(
                lambda: bool(self._queue) or workflow.all_handlers_finished()
            )
            if not self._queue:
                break
            await self._turn(ctx, input, run, self._queue.popleft())
        ctx.announce(f"continuing as new after {self._carry.turns} turns", kind="continue")
        carried = self._carry.model_copy(
            update={
                "memory": self._memory,
                "runs": self._carry.runs + 1,
                "stream": self.stream.get_state(),
                "usage": ctx.usage,
                "remembered": travelling(remembered(ctx.ledger)),
            }
        )
        # The budget as a person may have extended it goes on with what was spent.
        budget = ctx.spending.budget
        workflow.continue_as_new(
            input.model_copy(update={"carried": carried, "budget": budget}),
            **next_run_options(self.upgrade_on_continue_as_new),
        )

    def _continues(self) -> bool:
        """Whether the chat continues as new: its history is full, or a new version of
        its worker deployment is current and this run has answered a turn (the next
        run starts on that version; one that started there already stays)."""
        full = history_full(self._input.continue_after_events, self._input.continue_after_bytes)
        upgrade = self.upgrade_on_continue_as_new and self._carry.turns > self._turns_before
        return full or (upgrade and new_version())

    async def _turn(self, ctx: RecipeContext, input: ChatInput, run: _Run, p: _Pending) -> None:
        self._carry.turns += 1
        self._trim_stream()
        before = self._memory.model_copy(deep=True)
        user = self._say(ChatTurn(role="user", content=p.text))
        self._publish(ChatEvent(kind="user", key=p.id, seq=user.seq, text=p.text))
        self._current = p
        try:
            text = await self._answer(ctx, input, run, p.id, user.seq)
        except ApplicationError as exc:  # the run ends: over budget, a model with no price
            self._publish(ChatEvent(kind="error", key=p.id, seq=user.seq, text=exc.message))
            await self._end(p, exc.message)
            raise
        except ActivityError as exc:
            reraise_cancellation(exc)
            self._memory = before
            self._transcript = [line for line in self._transcript if line.seq < user.seq]
            p.error = f"the model call failed: {exc.cause or exc}"
            self._publish(ChatEvent(kind="error", key=p.id, seq=user.seq, text=p.error))
        else:
            stopped = text is None
            if stopped:
                text = self._stopped(user.seq)
            p.reply = ChatReply(
                id=p.id,
                seq=user.seq,
                text=text,
                run=self._carry.runs,
                status="stopped" if stopped else "answered",
            )
            self._remember(p.reply)
            self._publish(ChatEvent(kind="reply", key=p.id, seq=user.seq, text=text))
            await self._fold(ctx, input)
        finally:
            self._current = None
            # Notes that came after the turn's last model call wait for the next turn
            # as ordinary messages, first in the queue.
            self._queue.extendleft(reversed(self._steering))
            self._steering.clear()
        # The status stays `chatting`: the usage goes to the search attributes per turn.
        ctx.upsert_usage()
        p.done = True
        self._queued.pop(p.id, None)

    async def _answer(
        self, ctx: RecipeContext, input: ChatInput, run: _Run, key: str, seq: int
    ) -> str | None:
        """The reply, or None when a person stopped the turn (update `stop`): the turn is
        answered in a task of its own, which `stop` cancels."""
        self._stop_requested = False
        self._responding = asyncio.create_task(self._respond(ctx, input, run, key, seq))
        try:
            return await self._responding
        except (asyncio.CancelledError, ActivityError) as exc:
            # The run's own cancellation goes on up; only a person's stop ends the turn.
            stop = self._stop_requested and workflow.cancellation_reason() is None
            if stop and is_cancelled_exception(exc):
                return None
            raise
        finally:
            self._responding = None

    def _stopped(self, seq: int) -> str:
        """End a stopped turn in the conversation: every tool call it asked for gets a
        result (the model's protocol needs one), then the reply that says it stopped."""
        lines = [line for line in self._transcript if line.seq > seq]
        answered = {line.tool_call_id for line in lines if line.role == "tool"}
        for line in lines:
            for call in line.tool_calls:
                if call.id not in answered:
                    self._say(
                        ChatTurn(
                            role="tool", content=STOPPED_CALL, tool_call_id=call.id, name=call.name
                        )
                    )
        self._say(ChatTurn(role="assistant", content=STOPPED_REPLY))
        return STOPPED_REPLY

    def _add_steering(self, seq: int) -> None:
        """The steer notes that came since the turn's last model call, into its
        conversation; each one's `send` gets the reply that says so."""
        for p in self._steering:
            line = self._say(ChatTurn(role="user", content=steer_text(p.text)))
            self._publish(ChatEvent(kind="user", key=p.id, seq=line.seq, text=p.text))
            p.reply = ChatReply(
                id=p.id,
                seq=line.seq,
                text=f"steered turn {self._carry.turns} (the reply to message {seq})",
                run=self._carry.runs,
                status="steered",
                steered=seq,
            )
            self._remember(p.reply)
            p.done = True
            self._queued.pop(p.id, None)
        self._steering.clear()

    async def _respond(
        self, ctx: RecipeContext, input: ChatInput, run: _Run, key: str, seq: int
    ) -> str:
        """The reply: model calls, and the tools they ask for, until one answers."""
        for round_ in range(1, run.settings.max_turns + 1):
            self._carry.model_calls += 1
            number = self._carry.model_calls
            self._add_steering(seq)
            with ctx.scoped(chat_scope(self._carry.turns, round_)):
                response = await ctx.llm.request(
                    self._messages(input),
                    conversation=ArtifactSpan(
                        prefix=CHAT_MESSAGES_PREFIX, count=len(self._memory.window)
                    ),
                    tools=run.worker_tool_names or None,
                    tool_specs=run.workflow_tool_specs or None,
                    stream=StreamTo(topic=TOKENS_TOPIC, key=key) if input.stream else None,
                    summary=f"request model: message {seq}",
                )
            calls = [
                c if c.id else c.model_copy(update={"id": chat_call_id(number, k)})
                for k, c in enumerate(response.tool_calls)
            ]
            self._say(ChatTurn(role="assistant", content=response.text, tool_calls=calls))
            if not calls:
                return response.text.strip()
            for k, call in enumerate(calls):
                announce_action(ctx, tool_call_id(run.key, number, k), call)
            observations = await asyncio.gather(
                *(self._call(ctx, run, number, k, call) for k, call in enumerate(calls))
            )
            for k, (call, observation) in enumerate(zip(calls, observations, strict=True)):
                shown = self._tool_result(run, call, observation.text)
                announce_observation(
                    ctx, tool_call_id(run.key, number, k), observation, shown, None
                )
        return f"(no answer after {run.settings.max_turns} model calls)"

    async def _end(self, current: _Pending, error: str) -> None:
        """Answer the message being answered and every queued one with `error`, refuse
        what comes later, and return once every handler has finished."""
        self._ended = error
        for p in [current, *self._steering, *self._queue]:
            p.error, p.done = error, True
        self._steering.clear()
        self._queue.clear()
        self._queued.clear()
        self.stream.detach_pollers()
        await workflow.wait_condition(workflow.all_handlers_finished)

    def _tool_result(self, run: _Run, call: ToolCall, text: str) -> str:
        """Tell the model what the call gave (cut to the run's limit): what it was told."""
        shown = text
        limit = run.settings.max_observation_chars
        if len(text) > limit:
            shown = truncate_observation(text, limit)
        self._say(ChatTurn(role="tool", content=shown, tool_call_id=call.id, name=call.name))
        return shown

    def _messages(self, input: ChatInput) -> list[ChatMessage]:
        """The system message, with the memory's summaries and digest by reference."""
        refs: list[str] = [summary_id(s.round) for s in self._memory.summaries]
        if self._memory.digest is not None:
            refs.append(DIGEST_ID)
        content = input.system
        if refs:
            content += "\n\nWhat you remember of the earlier conversation:"
        return [ChatMessage(role="system", content=content, context=list(refs))]

    def _say(self, turn: ChatTurn) -> ChatLine:
        line = self._memory.add(turn)
        self._transcript.append(line)
        return line

    def _remember(self, reply: ChatReply) -> None:
        self._carry.answered.add(reply.id, reply.seq)
        replies = self._carry.replies
        replies[reply.id] = reply
        while len(replies) > REMEMBERED_REPLIES:
            replies.pop(next(iter(replies)))

    async def _read_back(self, key: str, seq: int) -> ChatReply:
        """The reply to the message `seq`, answered before and no longer carried: from
        this run's transcript, else from the run that wrote it."""
        run = self._carry.run_of(seq)
        text = reply_after(self._transcript, seq)
        if text is None and run is not None and run < self._carry.runs:
            start = self._carry.starts[run - self._carry.runs - 1]
            text = await workflow.execute_activity(
                "read_reply",
                ReplyLookup(run_id=start.run_id, seq=seq),
                result_type=str,
                activity_id=self._ctx.temporal_id(reply_lookup_id(seq)),
                summary=f"read reply: message {seq} of run {run}",
                start_to_close_timeout=READ_BACK_TIMEOUT,
                schedule_to_close_timeout=self._ctx.source_deadline,
            )
        if text is None:
            raise ApplicationError(
                f"message {key!r} was answered as message {seq}, but its reply can no "
                "longer be read (a run from before replies were indexed)",
                type=TURN_FAILED,
            )
        return ChatReply(id=key, seq=seq, text=text, run=self._carry.runs if run is None else run)

    # --- memory ---------------------------------------------------------------------

    async def fold_text(self, ctx: RecipeContext, input: ChatInput, fold: Fold) -> str | None:
        """The summarizer hook: the text of a summary or of the new digest; None (or a
        failed call) keeps the recipe's fallback."""
        previous = f"Memory so far:\n{fold.previous}\n\n" if fold.previous else ""
        try:
            return await ctx.llm.text(
                f"{previous}New messages:\n{render(fold.lines)}",
                system=FOLD_SYSTEM,
                summary=f"request model: fold into {fold.artifact_id}",
            )
        except ActivityError as exc:
            reraise_cancellation(exc)
            workflow.logger.warning("fold into %s failed: %s", fold.artifact_id, exc.cause)
            return None

    async def _fold(self, ctx: RecipeContext, input: ChatInput) -> None:
        policy = input.memory
        while (fold := policy.plan(self._memory)) is not None:
            text = None
            if fold.artifact_id is not None:
                scope = fold.artifact_id
                if scope == DIGEST_ID:
                    version = self._memory.digest.version if self._memory.digest else 0
                    scope = digest_scope(version + 1)
                with ctx.scoped(scope):
                    text = await self.fold_text(ctx, input, fold)
            self._memory = policy.apply(self._memory, fold, text)
            self._sync_ledger()

    def _sync_ledger(self) -> None:
        """The summaries and the digest as artifacts: what prompts name by reference and
        the `artifacts` query shows (the digest's version counts its folds)."""
        ledger = self._ctx.ledger
        for summary in self._memory.summaries:
            ledger.create(summary_id(summary.round), summary)
        digest = self._memory.digest
        if digest is not None:
            ledger.artifacts[DIGEST_ID] = Artifact(
                id=DIGEST_ID, type="Digest", version=digest.version, data=digest
            )

    # --- the stream -----------------------------------------------------------------

    def _publish(self, event: ChatEvent) -> None:
        self.stream.topic(MESSAGES_TOPIC, type=ChatEvent).publish(event)

    def _publish_line(self, line: Announcement) -> None:
        key = self._current.id if self._current else ""
        self.stream.topic(LINES_TOPIC, type=TurnLine).publish(TurnLine(key=key, line=line))

    def _trim_stream(self) -> None:
        """Keep the stream's log to the previous turn and this one: tokens are for the
        people watching now; the conversation itself is in the transcript."""
        state = self.stream.get_state()
        self.stream.truncate(self._turn_start)
        self._turn_start = state.base_offset + len(state.log)
