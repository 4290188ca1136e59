"""ReAct: think, call a tool, read what it said, repeat until the answer, within a budget.

The recipe owns the loop, the protocol, the ids, the approval gate, the endings
and the history discipline; you write only the hooks that need judgement, and a
three-line `run`:

    @workflow.defn
    class Accountant(ReAct[Books, Verdict]):
        @workflow.run
        async def run(self, books: Books) -> Verdict:
            return await self.execute(books)

        def question(self, books): ...                 # -> str
        def tools(self, books): ...                    # -> ["calculator", "ledger__query"]
        async def system(self, ctx, books, specs): ... # -> str: who the agent is
        async def finish(self, ctx, books, outcome): ...  # -> Verdict

Limits: `settings(input)`, a `ReActSettings` (`max_turns`, `loop_limit`, the
observation policy, the approval policy, the `search_sources` sizes): by default
the input itself when it subclasses `ReActSettings` (as `ReActInput` does), else
the defaults; override `settings` to set them otherwise.

Optional hooks: `mcp_servers(input)` (servers whose every tool the run may use),
`sources(input) -> list[SourceSpec]` (where `search_sources` looks; by default the
input's `sources`) and `summarize(ctx, input, observation_id, observation)` for the
`summarize` observation policy.

The loop. Tools are named; `list_tools` runs once per loop (activity and artifact
`tools:{run}`, carried when it continues as new) and gives their specs, and the
tools of the named MCP servers it skipped and why (a name no model accepts, an input
schema that is not JSON Schema).
Then, for turn 1..`max_turns`: status
`turn:{n}`, one model activity `llm:react:{run}:{n}` ("request model: turn N"),
and what the reply asks for:

- text protocol (the seed's Thought / Action / Action Input / PAUSE / Observation
  / Final Answer, parsed by `durafact._core.react.parse_reply`, with the stop sequence
  "Observation:"): one Action is one tool call; a Final Answer ends the run; a
  reply that breaks the format gets a correction message instead, and still
  counted as a turn;
- native protocol (`tools=` in chat completions): every call of the turn runs, at
  the same time; a reply without calls is the final answer.

Each tool call is the activity `call_tool`, id `tool:{run}:{turn}:{k}`, summary
"call tool: NAME", status `calling:{NAME}` (its phase, `DurafactStatus`, stays
`turn`), with the idempotency key
`{workflow id}:{activity id}`. A name the run was not given never reaches a tool:
its observation is "'x' is not a valid tool, try one of [...]". Every other call
passes `settings.tool_policy` first (durafact/_recipes/tool_gate.py): `deny` is the
observation "denied by policy: RULE" and no call; `ask` (by default, for a destructive
tool, `ToolSpec.destructive`) runs only once `ctx.ask_approval(thread="tool:{run}")`
says yes (status `awaiting_approval`), or an answer remembered earlier covers the
call; a rejection or a timeout (per `settings.approval`) is the observation "not
approved: REASON". Arguments
that do not validate and tools that raise come back from the activity as failed
observations, for the model to correct. So does a call that may or may not have
run and is not sent again (the activity fails with `ToolSessionLost`: its MCP
session broke mid-call), its observation saying to check before calling again.

search_sources. A run with sources is also offered `search_sources`, which runs in
workflow code: it fans out over the sources and reads the best documents
(durafact/_recipes/react_search.py says how). Its observation is linked `based_on` the
documents it read.

Observations. The full observation is the artifact `obs:{run}:{turn}:{k}`; the
model sees it through the policy: cut to `max_observation_chars` with
"[truncated: N of M characters]", or (`summarize`) replaced by one model call's
summary of it.

History grows linearly. Every message of the conversation is a `ChatTurn`
artifact `msg:{run}:{n}` (the question first), kept in the ledger, never in an
activity's input: each model call carries the constant system message and a
constant-size `ArtifactSpan` that the model activity expands with the
`context_messages` query. An assistant turn is stored in history once, as its
model activity's result; an observation once, as its tool activity's result. In
the text protocol the tool list reaches the system prompt the same way, as a
reference to `tools:{run}`.

Long runs (durafact/_recipes/react_long.py). What the model sees is the run's view
(`_Run.view`, a `LoopContext` of durafact/_core/loop_context.py), which the query
`context_messages` serves; after each turn the context policy (`keep_all`,
`prune_observations`, `compact`) may fold it. Between two turns, never within one, a
run whose history is full continues as new with `ReActInput.loop_carry`
(`ReActCarry`), and the answer is linked `based_on` the earlier runs (`run:{run_id}`)
as well as on its own observations. Only a `ReActInput` can carry the loop; a recipe
with another input stays in one run.

Endings (`ReActOutcome.ending`), each a visible status, never an exception:
`answer` (status `completed`; the artifact `answer:{run}` linked `based_on` every
observation before it), `turn_limit` (`max_turns` model calls without an answer)
and `looping` (the same failing call `loop_limit` times in a row).

Steering. The update `steer` (a `SteerNote`) takes a person's note while the loop
runs: it is added before the next model call as the user message "Note from a
person: ..." (`msg:{run}:{n}`, announced as `steer`), and the update returns that
call's turn once it is there. A note that arrives once the loop has ended is refused
by the validator; one still waiting when the run answers fails (`NotSteered`) saying
it was not seen.

`{run}` is `text_key` of the question.
"""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Annotated, ClassVar, Generic, Literal, TypeVar, cast

from pydantic import BaseModel, Field, field_validator, model_validator
from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError, ApplicationError

from durafact._core.approval import ApprovalPolicy, RememberScope
from durafact._core.ids import (
    earlier_run_id,
    idempotency_key,
    loop_digest_id,
    message_id,
    messages_prefix,
    observation_id,
    react_answer_id,
    react_run,
    react_turn_id,
    summary_scope,
    tool_approval_thread,
    tool_binding_id,
    tool_call_id,
    tools_id,
)
from durafact._core.ledger import Ledger
from durafact._core.llm import ArtifactSpan, ChatMessage, ChatTurn, LLMResponse, Usage
from durafact._core.loop_context import ContextPolicy, KeepAll, LoopContext, LoopLine
from durafact._core.react import (
    STOP,
    TEXT_PROTOCOL,
    FormatViolation,
    Observation,
    ReActFinal,
    ToolCallRecord,
    ToolList,
    bind_arguments,
    failed_observation,
    is_looping,
    observation_message,
    parse_reply,
    render_tools,
    reply_before_observation,
    summary_note,
    truncate_observation,
    unknown_tool_message,
)
from durafact._core.ready_commands import REACT
from durafact._core.sources import SourceSpec
from durafact._core.steer import NOT_STEERED, Steered, SteerNote, note_problem, steer_text
from durafact._core.text import brief, indent, not_blank
from durafact._core.tool_policy import RememberedDecision, ToolPolicy, travelling
from durafact._core.tools import (
    MCP_SEPARATOR,
    TOOL_SESSION_LOST,
    BoundCall,
    ToolCall,
    ToolListing,
    ToolListRequest,
    ToolRequest,
    ToolResult,
    ToolSpec,
    checked_tool_names,
)
from durafact._recipes.react_long import (
    EarlierRun,
    ReActCarry,
    continue_as_new,
    continues,
    fold_context,
    resume,
)
from durafact._recipes.react_search import (
    SEARCH_SOURCES,
    bind_search_call,
    search_sources,
    search_sources_spec,
)
from durafact._recipes.recipe import Recipe, RecipeContext, RecipeSettings, subject_text
from durafact._recipes.tool_gate import (
    Judged,
    Refusal,
    clear_tool_call,
    hold_remembered,
    judge_tool_call,
    remembered,
)

In = TypeVar("In", bound=BaseModel)
Out = TypeVar("Out")

Ending = Literal["answer", "turn_limit", "looping"]

# Runs started since this patch judge (bind) every call of a native turn at once and then
# clear them in the model's order, so the turn's questions are asked in that order: its
# first question is about its first call asked about. Older runs asked as each binding
# came back, in whatever order that was. One call is judged and asked the same way either
# way, and records no marker.
QUESTIONS_IN_CALL_ORDER = "durafact-questions-in-call-order"


class ReActSettings(RecipeSettings):
    """The limits of a ReAct run: how one run of the loop behaves."""

    protocol: Literal["text", "native"] = Field(
        default="text",
        description="`text`: Thought/Action/Observation in plain text; `native`: the "
        "chat API's tool calls.",
    )
    max_turns: int = Field(
        default=8,
        ge=1,
        le=10_000,
        description="Model calls at most; then the run ends. A long run continues as new "
        "between turns (`continue_after_events`, `continue_after_bytes`).",
    )
    max_observation_chars: int = Field(
        default=4000, ge=1, description="Longer observations pass through the policy."
    )
    observation_policy: Literal["truncate", "summarize"] = Field(
        default="truncate",
        description="`truncate`: the first characters and a note; `summarize`: one model call.",
    )
    loop_limit: int = Field(
        default=3,
        ge=0,
        description="The same failing call this many times in a row ends "
        "the run (`looping`); 0 turns the guard off.",
    )
    approval: ApprovalPolicy = Field(
        default_factory=ApprovalPolicy,
        description="How long a destructive call waits for a person, and what silence means.",
    )
    tool_policy: ToolPolicy = Field(
        default_factory=ToolPolicy,
        description="Which tool calls run, which are denied, which ask a person (by default: "
        "ask before a destructive tool), and decisions remembered earlier.",
    )
    context: ContextPolicy = Field(
        default_factory=KeepAll,
        description="What the model sees of earlier turns: `keep_all`, `prune_observations` "
        "or `compact` (durafact/_core/loop_context.py).",
    )
    continue_after_events: int = Field(
        default=10_000,
        ge=100,
        description="Between two turns, a run whose history has this many events (or "
        "`continue_after_bytes`, or that the server says is full) continues as new.",
    )
    continue_after_bytes: int = Field(default=1_000_000, ge=10_000)
    source_refs: int = Field(
        default=5,
        ge=1,
        le=50,
        description="search_sources: refs kept per call, best first across the sources.",
    )
    source_docs: int = Field(
        default=2,
        ge=1,
        le=10,
        description="search_sources: how many of the best refs are read and shown; the "
        "others stay unread refs.",
    )
    excerpt_chars: int = Field(
        default=400,
        ge=40,
        description="search_sources: characters of each read document the model sees (the "
        "whole document stays in the ledger).",
    )


class ReActAnswer(BaseModel):
    """The artifact `answer:{run}`."""

    question: str
    text: str


class ReActOutcome(BaseModel):
    """How the loop ended: what `finish` gets."""

    question: str
    ending: Ending
    answer: str | None = None
    answer_id: str | None = None
    turns: int = Field(description="Model calls made in the loop.")
    calls: list[ToolCallRecord] = Field(default_factory=list)


class _Run:
    """One run's bookkeeping: its key, tools, conversation and observations so far."""

    def __init__(self, ctx: RecipeContext, question: str, settings: ReActSettings) -> None:
        self.ctx = ctx
        self.question = question
        self.key = react_run(question)
        self.settings = settings
        self.specs: list[ToolSpec] = []
        self.sources: list[SourceSpec] = []
        # What the model sees (its messages are also the artifacts `msg:{run}:{n}`).
        self.view = LoopContext()
        self.turn = 0
        self.first_turn = 1
        # The history this run began with (the carry's size, after continue-as-new).
        info = workflow.info()
        self.start_events = info.get_current_history_length()
        self.start_bytes = info.get_current_history_size()
        self.observations: dict[str, Observation] = {}
        self.calls: list[ToolCallRecord] = []
        # The earlier runs of the chain (continue-as-new) and their last observations.
        self.earlier: list[EarlierRun] = []
        self.carried_recent: list[Observation] = []
        # The documents a search_sources call read, by its call id: its observation's basis.
        self.read: dict[str, list[str]] = {}

    @property
    def native(self) -> bool:
        return self.settings.protocol == "native"

    @property
    def tool_names(self) -> list[str]:
        return [s.name for s in self.specs]

    def runs_here(self, name: str) -> bool:
        """Whether the tool runs in workflow code (search_sources) rather than on a worker."""
        return name == SEARCH_SOURCES and bool(self.sources)

    @property
    def worker_tool_names(self) -> list[str]:
        return [s.name for s in self.specs if not self.runs_here(s.name)]

    @property
    def workflow_tool_specs(self) -> list[ToolSpec]:
        return [s for s in self.specs if self.runs_here(s.name)]

    def spec(self, name: str) -> ToolSpec | None:
        return next((s for s in self.specs if s.name == name), None)

    def say(self, turn: ChatTurn, observation: str | None = None) -> None:
        """Add a message of this turn to the conversation: the artifact `msg:{run}:{n}`,
        and a line of the model's view (`observation`: the artifact it shows)."""
        number = self.view.next_message
        self.ctx.ledger.create(message_id(self.key, number), turn)
        self.view.next_message += 1
        self.view.window.append(
            LoopLine(said=turn, message=number, turn=self.turn, observation=observation)
        )

    def shown(self) -> list[ChatTurn]:
        """The messages the model sees after the system message."""
        digest = self.view.digest
        return self.view.shown(loop_digest_id(self.key, digest.version) if digest else "")

    def conversation(self) -> ArtifactSpan:
        """What the model sees, named in constant size (the `context_messages` query)."""
        count = len(self.view.window) + (1 if self.view.digest else 0)
        return ArtifactSpan(prefix=messages_prefix(self.key), count=count)

    def latest(self) -> list[Observation]:
        """The observations so far, the last ones of earlier runs first: the loop guard's."""
        return [*self.carried_recent, *self.observations.values()]


class _Note:
    """A person's note waiting for the next model call, and where it went."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.steered: Steered | None = None


class ReAct(Recipe[In, Out], Generic[In, Out]):
    """Ask the model, run the tools it names, show it what they said, until it answers."""

    recipe_name = "react"
    settings_model = ReActSettings
    tool_timeout: ClassVar[timedelta] = timedelta(minutes=5)
    # The tool activities heartbeat: a worker that dies mid-call is noticed this soon.
    tool_heartbeat_timeout: ClassVar[timedelta] = timedelta(seconds=10)
    # A tool provider that is down (ToolUnavailable) is tried again until the run's model
    # deadline, like the model: a tool the model asked for is part of the same turn.
    tool_retry: ClassVar[RetryPolicy] = RetryPolicy(
        initial_interval=timedelta(seconds=1),
        backoff_coefficient=2.0,
        maximum_interval=timedelta(seconds=30),
        maximum_attempts=0,
    )
    # What a person's answer to a tool question may remember in this recipe.
    remember_scopes: ClassVar[tuple[RememberScope, ...]] = ("call", "tool")
    steerable = True

    def __init__(self) -> None:
        super().__init__()
        self._notes: list[_Note] = []
        # Once the loop has ended no model call is left for a note to go before.
        self._loop_over = False

    # --- steering -----------------------------------------------------------------------

    @workflow.update
    async def steer(self, note: SteerNote) -> Steered:
        """A person's note for the agent, added before its next model call as a user
        message ("Note from a person: ..."); returns which call, once it is there."""
        return await self._take_note(note)

    @steer.validator
    def _validate_steer(self, note: SteerNote) -> None:
        # Runs before the update is accepted: a refusal writes nothing to history.
        problem = note_problem(note.text) or self.steer_problem()
        if problem:
            raise ApplicationError(problem, type=NOT_STEERED, non_retryable=True)

    def steer_problem(self) -> str | None:
        """Why the run takes no note now (None: it does)."""
        if self._loop_over:
            return "the run's tool loop has ended: no model call is left to steer"
        return None

    async def _take_note(self, note: SteerNote) -> Steered:
        """Wait for the next model call to take the note; refused if none comes."""
        waiting = _Note(note.text)
        self._notes.append(waiting)
        await workflow.wait_condition(lambda: waiting.steered is not None or self._loop_over)
        if waiting.steered is None:
            raise ApplicationError(
                "the run ended before another model call: the note was not seen",
                type=NOT_STEERED,
                non_retryable=True,
            )
        return waiting.steered

    def _add_notes(self, ctx: RecipeContext, run: _Run, turn: int) -> None:
        """The notes that came since the last model call, into the conversation."""
        for waiting in self._notes:
            message = message_id(run.key, run.view.next_message)
            run.say(ChatTurn(role="user", content=steer_text(waiting.text)))
            ctx.announce(f"note from a person: {brief(waiting.text)}", kind="steer")
            waiting.steered = Steered(turn=turn, message=message)
        self._notes.clear()

    # --- hooks --------------------------------------------------------------------------

    def question(self, input: In) -> str:
        return subject_text(input, "question", "text")

    def tools(self, input: In) -> list[str]:
        return list(getattr(input, "tools", []))

    def mcp_servers(self, input: In) -> list[str]:
        return list(getattr(input, "mcp_servers", []))

    def sources(self, input: In) -> list[SourceSpec]:
        """Where `search_sources` looks; none: the tool is not offered."""
        return list(getattr(input, "sources", []))

    def settings(self, input: In) -> ReActSettings:
        """This run's limits (see `Recipe.settings`)."""
        return cast(ReActSettings, super().settings(input))

    async def system(self, ctx: RecipeContext, input: In, specs: list[ToolSpec]) -> str:
        """Who the agent is; the text protocol's format rules are added by the recipe."""
        return SYSTEM

    async def summarize(
        self, ctx: RecipeContext, input: In, observation_id: str, observation: Observation
    ) -> str:
        return await ctx.llm.text(
            f"Question: {self.question(input)}\nSummarize the tool result given as context.",
            system=SUMMARIZER,
            context=[observation_id],
            summary=f"request model: summarize {observation_id}",
        )

    async def finish(self, ctx: RecipeContext, input: In, outcome: ReActOutcome) -> Out:
        raise NotImplementedError

    # --- the lifecycle ------------------------------------------------------------------

    async def lifecycle(self, ctx: RecipeContext, input: In) -> Out:
        run = _Run(ctx, self.question(input), self.settings(input))
        hold_remembered(ctx.ledger, run.settings.tool_policy.remembered)
        self._loop = run
        run.sources = self.sources(input)
        carry = input.loop_carry if isinstance(input, ReActInput) else None
        if carry is None:
            run.specs = await self._list_tools(ctx, run, input)
        else:
            run.specs = resume(ctx, run, carry)
        messages = self._system_messages(run, await self.system(ctx, input, run.specs))
        if carry is None:
            run.say(ChatTurn(role="user", content=f"Question: {run.question}"))

        ending: Ending = "turn_limit"
        answer: str | None = None
        turn = run.first_turn - 1
        for turn in range(run.first_turn, run.settings.max_turns + 1):
            # Between two turns, never within one: no tool call or approval is in flight.
            upgrade = self.upgrade_on_continue_as_new
            if turn > run.first_turn and isinstance(input, ReActInput) and continues(run, upgrade):
                # A waiting note goes into the carried view now: its update then finishes,
                # as every handler must before the run continues, and the next run's first
                # call sees it.
                self._add_notes(ctx, run, turn)
                await continue_as_new(ctx, input, run, turn - 1, upgrade)
            run.turn = turn
            ctx.set_status(f"turn:{turn}", f"turn {turn}/{run.settings.max_turns}")
            self._add_notes(ctx, run, turn)
            with ctx.scoped(react_turn_id(run.key, turn)):
                response = await ctx.llm.request(
                    messages,
                    conversation=run.conversation(),
                    tools=run.worker_tool_names if run.native else None,
                    tool_specs=run.workflow_tool_specs if run.native else None,
                    stop=None if run.native else STOP,
                    summary=f"request model: turn {turn}",
                )
            if run.native:
                answer, calls = self._read_native_reply(ctx, run, turn, response)
            else:
                answer, calls = self._read_text_reply(ctx, run, turn, response)
            if answer is not None:
                ending = "answer"
                break
            # Every call of the turn at once; their observations in the order asked.
            if len(calls) > 1 and workflow.patched(QUESTIONS_IN_CALL_ORDER):
                judged = await asyncio.gather(
                    *(self._judge(ctx, run, turn, k, call) for k, call in enumerate(calls))
                )
                observations = await asyncio.gather(
                    *(
                        self._clear_and_run(ctx, run, turn, k, call, judgement)
                        for k, (call, judgement) in enumerate(zip(calls, judged, strict=True))
                    )
                )
            else:
                observations = await asyncio.gather(
                    *(self._call(ctx, run, turn, k, call) for k, call in enumerate(calls))
                )
            for k, (call, observation) in enumerate(zip(calls, observations, strict=True)):
                await self._observe(ctx, input, run, turn, k, call, observation)
            if is_looping(run.latest(), run.settings.loop_limit):
                ending = "looping"
                break
            await fold_context(ctx, run, turn)
        self._loop_over = True
        result = await self._end(ctx, input, run, ending, answer, turn)
        # A note that came too late is told so before the run closes.
        await workflow.wait_condition(workflow.all_handlers_finished)
        return result

    @workflow.query
    def context_messages(self, conversation: ArtifactSpan) -> list[ChatTurn]:
        """The model's view of the loop (see durafact/_core/loop_context.py), for the model
        activity; any other span from the ledger."""
        run = getattr(self, "_loop", None)
        if run is None or conversation.prefix != messages_prefix(run.key):
            return Recipe.context_messages(self, conversation)
        return run.shown()[: conversation.count]

    # --- the parts of a turn ------------------------------------------------------------

    @staticmethod
    def _system_messages(run: _Run, system: str) -> list[ChatMessage]:
        """The constant messages of every model call. The text protocol adds its rules,
        and the tool listing by reference to `tools:{run}` (stored once)."""
        if run.native:
            return [ChatMessage(role="system", content=system)]
        return [
            ChatMessage(
                role="system", content=f"{system}\n\n{TEXT_PROTOCOL}", context=[tools_id(run.key)]
            )
        ]

    async def _list_tools(self, ctx: RecipeContext, run: _Run, input: In) -> list[ToolSpec]:
        """The run's tools, listed once (`tools:{run}`), and search_sources when the run has
        sources (its spec made in workflow code, not listed by a worker)."""
        names = [n for n in self.tools(input) if not run.runs_here(n)]
        request = ToolListRequest(tools=names, mcp_servers=self.mcp_servers(input))
        listing = ToolListing(specs=[])
        if request.tools or request.mcp_servers:
            names = ", ".join([*request.tools, *request.mcp_servers])
            # Python tools alone are listed from the worker's registry at once: a local
            # activity, one marker event in the workflow task that asks, where an activity
            # costs three events and one more workflow task (3.6 KB of a short run's
            # history). MCP servers answer over the network, maybe slowly, and the
            # activity heartbeats meanwhile: they keep an activity of their own.
            local = not request.mcp_servers
            listing = await (
                workflow.execute_local_activity if local else workflow.execute_activity
            )(
                "list_tools",
                request,
                result_type=ToolListing,
                activity_id=ctx.temporal_id(tools_id(run.key)),
                summary=f"get tools: {brief(names, 80)}",
                start_to_close_timeout=self.tool_timeout,
                schedule_to_close_timeout=ctx.model_deadline,
                retry_policy=self.tool_retry,
                **({} if local else {"heartbeat_timeout": self.tool_heartbeat_timeout}),
            )
        specs = listing.specs
        if run.sources:
            specs = [s for s in specs if s.name != SEARCH_SOURCES]
            specs.append(search_sources_spec(run.sources))
        # The listing on lines of its own after the `[tools:{run}]` the model activity adds.
        text = f"\n{render_tools(specs)}"
        ctx.ledger.create(
            tools_id(run.key), ToolList(specs=specs, text=text, skipped=listing.skipped)
        )
        ctx.announce(f"tools: {', '.join(s.name for s in specs) or 'none'}")
        for tool in listing.skipped:
            ctx.announce(f"tool {tool.name} skipped: {tool.reason}", kind="warning")
        return specs

    def _read_text_reply(
        self, ctx: RecipeContext, run: _Run, turn: int, response: LLMResponse
    ) -> tuple[str | None, list[ToolCall]]:
        """(the final answer, or None and the one call the reply asks for). A reply that
        breaks the format adds the correction to the conversation and asks for nothing."""
        run.say(ChatTurn(role="assistant", content=reply_before_observation(response.text)))
        parsed = parse_reply(response.text, run.tool_names)
        if isinstance(parsed, FormatViolation):
            ctx.announce(f"format: {parsed.problem}; correcting", kind="correction")
            run.say(ChatTurn(role="user", content=parsed.correction))
            return None, []
        if parsed.thought:
            ctx.announce(f"thought: {brief(parsed.thought)}", kind="thought")
        if isinstance(parsed, ReActFinal):
            return parsed.answer, []
        call = ToolCall(
            id=tool_call_id(run.key, turn, 0),
            name=parsed.tool,
            arguments=bind_arguments(parsed.arguments, run.spec(parsed.tool)),
        )
        announce_action(ctx, tool_call_id(run.key, turn, 0), call)
        return None, [call]

    def _read_native_reply(
        self, ctx: RecipeContext, run: _Run, turn: int, response: LLMResponse
    ) -> tuple[str | None, list[ToolCall]]:
        """(the final answer, or None and the calls the reply asks for)."""
        # A call without an id (some local servers) gets one: its tool message must name it.
        calls = [
            call if call.id else call.model_copy(update={"id": tool_call_id(run.key, turn, k)})
            for k, call in enumerate(response.tool_calls)
        ]
        run.say(ChatTurn(role="assistant", content=response.text, tool_calls=calls))
        if not calls:
            return response.text.strip(), []
        if response.text.strip():
            ctx.announce(f"thought: {brief(response.text)}", kind="thought")
        for k, call in enumerate(calls):
            announce_action(ctx, tool_call_id(run.key, turn, k), call)
        return None, calls

    async def _call(
        self, ctx: RecipeContext, run: _Run, turn: int, k: int, call: ToolCall
    ) -> Observation:
        """One tool call, judged, cleared and run: its full observation, whatever happened.
        (How runs from before `QUESTIONS_IN_CALL_ORDER` run each call of a turn.)"""
        judged = await self._judge(ctx, run, turn, k, call)
        return await self._clear_and_run(ctx, run, turn, k, call, judged)

    async def _judge(
        self, ctx: RecipeContext, run: _Run, turn: int, k: int, call: ToolCall
    ) -> Judged | Observation:
        """The policy's judgement of call `k` as it would run, or its failed observation."""
        spec = run.spec(call.name)
        if spec is None:  # not one of the run's tools: never sent to the worker
            return failed_observation(
                call, "UnknownTool", unknown_tool_message(call.name, run.tool_names)
            )
        judged = await judge_tool_call(
            ctx,
            call,
            destructive=spec.destructive,
            policy=run.settings.tool_policy,
            bind=lambda call: self._bind(ctx, run, tool_binding_id(run.key, turn, k), call),
        )
        if isinstance(judged, Refusal):
            return failed_observation(call, judged.error_type, judged.text)
        return judged

    async def _clear_and_run(
        self,
        ctx: RecipeContext,
        run: _Run,
        turn: int,
        k: int,
        call: ToolCall,
        judged: Judged | Observation,
    ) -> Observation:
        """Call `k` as the model made it, cleared as judged (a question asked when the
        policy says `ask`) and run: its full observation, whatever happened. A refused
        call's observation keeps the model's arguments: the loop guard compares those."""
        if isinstance(judged, Observation):
            return judged
        activity_id = tool_call_id(run.key, turn, k)
        cleared = await clear_tool_call(
            ctx,
            tool_approval_thread(run.key),
            judged,
            approval=run.settings.approval,
            remember=self.remember_scopes,
            call_id=activity_id,
        )
        if isinstance(cleared, Refusal):
            return failed_observation(call, cleared.error_type, cleared.text)
        call, bound = cleared
        ctx.set_status(f"calling:{call.name}", f"call tool: {call.name}", phase="turn")
        if run.runs_here(call.name):
            observation, run.read[activity_id] = await search_sources(
                ctx, call, activity_id, run.sources, run.settings
            )
            return observation
        result = await self._call_tool(ctx, activity_id, call, bound)
        return Observation(
            call_id=call.id,
            tool=call.name,
            arguments=call.arguments,
            ok=result.ok,
            error_type=result.error_type,
            text=result.content,
        )

    async def _bind(
        self, ctx: RecipeContext, run: _Run, activity_id: str, call: ToolCall
    ) -> BoundCall:
        """The call's arguments as its tool will receive them (the gate judges these). A
        Python tool's model is in the worker's registry: a local activity, one marker
        event; an MCP tool's schema may need its server: an activity that heartbeats."""
        if run.runs_here(call.name):
            return bind_search_call(call)
        local = MCP_SEPARATOR not in call.name
        return await (workflow.execute_local_activity if local else workflow.execute_activity)(
            "bind_tool_call",
            call,
            result_type=BoundCall,
            activity_id=ctx.temporal_id(activity_id),
            summary=f"bind tool: {call.name}",
            start_to_close_timeout=self.tool_timeout,
            schedule_to_close_timeout=ctx.model_deadline,
            retry_policy=self.tool_retry,
            **({} if local else {"heartbeat_timeout": self.tool_heartbeat_timeout}),
        )

    async def _call_tool(
        self, ctx: RecipeContext, activity_id: str, call: ToolCall, bound: bool = False
    ) -> ToolResult:
        """The `call_tool` activity's result. A call that may or may not have run fails
        the activity at once (`ToolSessionLost`, never retried): that is a failed result
        too, for the model and the person to check, not the run's failure. `bound`: the
        call's arguments were judged as they are (durafact/_recipes/tool_gate.py)."""
        try:
            return await workflow.execute_activity(
                "call_tool",
                ToolRequest(
                    call=call,
                    idempotency_key=idempotency_key(workflow.info().workflow_id, activity_id),
                    bound=bound,
                ),
                result_type=ToolResult,
                activity_id=ctx.temporal_id(activity_id),
                summary=f"call tool: {call.name}",
                start_to_close_timeout=self.tool_timeout,
                schedule_to_close_timeout=ctx.model_deadline,
                heartbeat_timeout=self.tool_heartbeat_timeout,
                retry_policy=self.tool_retry,
            )
        except ActivityError as exc:
            lost = exc.cause
            if not (isinstance(lost, ApplicationError) and lost.type == TOOL_SESSION_LOST):
                raise
            return ToolResult(
                call_id=call.id,
                name=call.name,
                ok=False,
                content=lost.message,
                error_type=TOOL_SESSION_LOST,
            )

    async def _observe(
        self,
        ctx: RecipeContext,
        input: In,
        run: _Run,
        turn: int,
        k: int,
        call: ToolCall,
        observation: Observation,
    ) -> None:
        """Keep the full observation (`obs:{run}:{turn}:{k}`) and tell the model what the
        observation policy lets through."""
        oid = observation_id(run.key, turn, k)
        ctx.ledger.create(oid, observation)
        run.observations[oid] = observation
        for doc_id in run.read.get(tool_call_id(run.key, turn, k), []):
            ctx.ledger.link(oid, "based_on", doc_id)
        run.calls.append(
            ToolCallRecord(
                id=tool_call_id(run.key, turn, k),
                tool=call.name,
                ok=observation.ok,
                error_type=observation.error_type,
            )
        )
        text, limit = observation.text, run.settings.max_observation_chars
        shown = text
        if len(text) > limit and run.settings.observation_policy == "summarize":
            with ctx.scoped(summary_scope(oid)):
                summary = await self.summarize(ctx, input, oid, observation)
            shown = f"{truncate_observation(summary, limit)}\n{summary_note(len(text))}"
        elif len(text) > limit:
            shown = truncate_observation(text, limit)
        announce_observation(ctx, tool_call_id(run.key, turn, k), observation, shown, oid)
        if run.native:
            turn = ChatTurn(role="tool", content=shown, tool_call_id=call.id, name=call.name)
        else:
            turn = ChatTurn(role="user", content=observation_message(shown))
        run.say(turn, observation=oid)

    async def _end(
        self,
        ctx: RecipeContext,
        input: In,
        run: _Run,
        ending: Ending,
        answer: str | None,
        turns: int,
    ) -> Out:
        """The answer artifact (or the announcement of why there is none), then `finish`."""
        answer_id = None
        if answer is not None:
            answer_id = react_answer_id(run.key)
            ctx.ledger.create(answer_id, ReActAnswer(question=run.question, text=answer))
            for oid in run.observations:
                ctx.ledger.link(answer_id, "based_on", oid)
            # The observations of earlier runs, by the run that holds them.
            for earlier in run.earlier:
                ctx.ledger.link(answer_id, "based_on", earlier_run_id(earlier.run_id))
            ctx.announce(f"answer: {brief(answer)}", kind="answer")
        elif ending == "looping":
            last = run.latest()[-1]
            ctx.announce(
                f"{last.tool} failed {run.settings.loop_limit} times in a row with the same "
                "arguments: stopped",
                kind="looping",
            )
        else:
            ctx.announce(f"no answer after {turns} turns", kind="turn_limit")
        outcome = ReActOutcome(
            question=run.question,
            ending=ending,
            answer=answer,
            answer_id=answer_id,
            turns=turns,
            calls=list(run.calls),
        )
        result = await self.finish(ctx, input, outcome)
        ctx.set_status("completed" if ending == "answer" else ending)
        return result


# --- The ready, LLM-driven ReAct ----------------------------------------------------------


class ReActInput(ReActSettings):
    """The input of `ReActWorkflow`: the question, the tools and sources, the limits."""

    question: Annotated[str, not_blank("question")] = Field(
        description="What the agent should find out."
    )
    tools: list[str] = Field(
        default_factory=lambda: ["calculator"],
        description="Names of the worker's tools the agent may use (`server__tool` for one "
        "MCP tool).",
    )
    mcp_servers: list[str] = Field(
        default_factory=list, description="MCP servers (by name) whose every tool it may use."
    )
    sources: list[SourceSpec] = Field(
        default_factory=list,
        description="Where the built-in `search_sources` looks; with none it is not offered.",
    )
    loop_carry: ReActCarry | None = Field(
        default=None,
        description="Set by the run itself when it continues as new: where the loop stands.",
    )

    @field_validator("tools", "mcp_servers")
    @classmethod
    def _names(cls, names: list[str]) -> list[str]:
        return checked_tool_names(names)

    @model_validator(mode="after")
    def _sources(self) -> ReActInput:
        ids = [s.source_id for s in self.sources]
        twice = sorted({i for i in ids if ids.count(i) > 1})
        if twice:
            raise ValueError(f"two sources are named {', '.join(map(repr, twice))}")
        if SEARCH_SOURCES in self.tools and not self.sources:
            raise ValueError(f"{SEARCH_SOURCES} needs sources to search: give sources")
        return self


class ReActResult(BaseModel):
    """How the run ended, without the conversation: the texts stay in the ledger
    (query `artifacts`), so the result does not store them again."""

    question: str
    ending: Ending
    answer: str | None
    answer_id: str | None
    turns: int
    tool_calls: list[ToolCallRecord]
    usage: Usage
    remembered: list[RememberedDecision] = Field(
        default_factory=list,
        description="The answers that outlive the run (`call` scope), for a parent to "
        "pass on to its next agent.",
    )


SYSTEM = (
    "You are a careful assistant that answers questions with the help of tools. Use a tool "
    "whenever it can check or compute something better than you can, read what it returns, "
    "and answer only when the results support the answer. If a tool fails, read the error "
    "and change what you send instead of repeating the same call."
)
SUMMARIZER = (
    "You shorten a tool's result for an assistant answering the question below. Keep every "
    "fact, number and name that could matter for the question; drop the rest. Plain text, "
    "no preamble."
)


def show_react(result: ReActResult, ledger: Ledger | None) -> str:
    """The answer (or why there is none), the turns, and each tool call's outcome."""
    if result.answer is not None:
        lines = ["answer:", indent(result.answer, "  ")]
    elif result.ending == "looping":
        failing = [c for c in result.tool_calls if not c.ok]
        last = failing[-1] if failing else None
        what = f"{last.tool} failed ({last.error_type or 'error'})" if last else "a call failed"
        lines = [f"no answer: looping: {what} the same way again and again, so the run stopped"]
    else:
        lines = [f"no answer: turn_limit: the model did not answer within {result.turns} turns"]
    lines.append(f"turns: {result.turns}")
    if not result.tool_calls:
        return "\n".join([*lines, "tool calls: none"])
    lines.append("tool calls:")
    for call in result.tool_calls:
        turn = call.id.rsplit(":", 2)[-2] if call.id.count(":") >= 2 else "?"
        outcome = "ok" if call.ok else f"failed ({call.error_type or 'error'})"
        lines.append(f"  turn {turn}: {call.tool} {outcome}")
    return "\n".join(lines)


@workflow.defn
class ReActWorkflow(ReAct[ReActInput, ReActResult]):
    """A question and tool names in; the loop's answer, or how it stopped."""

    command = REACT
    show_result = staticmethod(show_react)
    upgrade_on_continue_as_new = True

    @workflow.run
    async def run(self, input: ReActInput) -> ReActResult:
        return await self.execute(input)

    async def finish(
        self, ctx: RecipeContext, input: ReActInput, outcome: ReActOutcome
    ) -> ReActResult:
        return ReActResult(
            question=outcome.question,
            ending=outcome.ending,
            answer=outcome.answer,
            answer_id=outcome.answer_id,
            turns=outcome.turns,
            tool_calls=outcome.calls,
            usage=ctx.usage,
            remembered=travelling(remembered(ctx.ledger)),
        )


def announce_observation(
    ctx: RecipeContext, call_id: str, observation: Observation, shown: str, artifact: str | None
) -> None:
    """The line of what a call gave (`shown`: what the model is told), naming the call
    as its action line did, and the artifact that keeps it whole."""
    result = {"id": call_id, "name": observation.tool, "ok": observation.ok, "text": shown}
    ctx.announce(
        f"observation: {brief(shown)}",
        kind="observation",
        data={"tool_result": {**result, "artifact": artifact}},
    )


def announce_action(ctx: RecipeContext, call_id: str, call: ToolCall) -> None:
    """The line of a call the model asked for; its data names the call by `call_id`, the
    id its question and its observation carry too (the model's own may repeat)."""
    ctx.announce(
        f"action: {call.name} {brief(call.arguments)}",
        kind="action",
        data={"tool_call": {"id": call_id, "name": call.name, "arguments": call.arguments}},
    )
