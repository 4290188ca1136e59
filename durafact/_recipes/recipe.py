"""What every recipe workflow shares: the context its hooks use, the base of its
limits (`RecipeSettings`, read through `Recipe.settings`), and its queries.

A recipe's hooks reach the world only through `RecipeContext`: `ctx.llm` makes one
model activity per call, `ctx.announce` records progress for the starter's live
output, `ctx.set_status` keeps the Web UI's details and search attributes current,
and `ctx.ledger` holds the artifacts. Everything here runs inside the workflow
sandbox, so it is deterministic: no I/O, no clock, no randomness.

Budget. Every recipe's settings have a `budget` (`RecipeSettings`); `ctx.spending`
(durafact/_recipes/spending.py) checks it before each model call and each child
`ctx.run_child` starts, and charges what they spent: spent, the run fails
`over_budget` or asks a person, as the budget says.

Human approval. `await ctx.ask_approval(thread, text, policy)` asks a person and
waits durably for the answer (durafact/_recipes/approvals.py); every recipe workflow takes
answers through the signal `answer` (fire and forget) and the update `decide`
(returns the outcome, and its validator refuses a bad answer before anything is
written to history), and lists what waits through the query `pending_questions`.
The questions live in the ledger as `approval:{thread}:{n}` artifacts, and only
there: a handler applies an answer to its question at once, and the waiting
`ask_approval` sees the question closed. So an answer is never lost between its
arrival and the wait, while an answer for a question not asked yet (an unknown id,
or no id while nothing is pending) is refused like any other bad answer: the signal
drops it with a warning announcement, the update fails at the caller.
"""

from __future__ import annotations

import asyncio
import re
import typing
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from datetime import timedelta
from typing import Any, ClassVar, Generic, TypeVar

from pydantic import BaseModel, Field, field_validator
from temporalio import workflow
from temporalio.common import RetryPolicy, SearchAttributeKey, SearchAttributeUpdate
from temporalio.exceptions import (
    ApplicationError,
    ChildWorkflowError,
    FailureError,
    is_cancelled_exception,
)

from durafact._core.approval import (
    ApprovalAnswer,
    ApprovalOutcome,
    ApprovalQuestion,
    answer_of,
)
from durafact._core.budget import Budget
from durafact._core.commands import Command
from durafact._core.forks import FORK_ID, FORKED_FROM, Fork, ForkRules
from durafact._core.ids import (
    CANCELLATION_ID,
    OPAQUE_IDS_MEMO,
    activity_id,
    fallback_id,
    opaque_id,
    prompt_id,
)
from durafact._core.ledger import Artifact, Ledger
from durafact._core.llm import (
    FALLBACK_AFTER,
    ArtifactSpan,
    ChatMessage,
    ChatTurn,
    ContextRef,
    ContextText,
    LLMRequest,
    LLMResponse,
    ModelFallback,
    Prompt,
    StreamTo,
    Usage,
    checked_endpoints,
    type_path,
)
from durafact._core.sources import DEFAULT_ENDPOINT
from durafact._core.text import counted, shorten
from durafact._core.tools import ToolSpec
from durafact._recipes.approvals import AWAITING_APPROVAL, Approvals
from durafact._recipes.spending import OVER_BUDGET, Spending, spent_of, with_spent

RECIPE_ATTRIBUTE = SearchAttributeKey.for_keyword("DurafactRecipe")
STATUS_ATTRIBUTE = SearchAttributeKey.for_keyword("DurafactStatus")
# What the run's model calls used so far (`Usage.total_tokens`, `Usage.cost` in the
# worker's currency; unset while a call's model had no price), upserted with each phase.
TOKENS_ATTRIBUTE = SearchAttributeKey.for_int("DurafactTokens")
COST_ATTRIBUTE = SearchAttributeKey.for_float("DurafactCost")
SEARCH_ATTRIBUTES = (RECIPE_ATTRIBUTE, STATUS_ATTRIBUTE, TOKENS_ATTRIBUTE, COST_ATTRIBUTE)
# A message at least this long that an earlier call of the run sent goes by reference
# (`RecipeContext._sent_once`); a reference costs about 40 characters.
REPEAT_MIN_CHARS = 120
CANCELED = "canceled"
# The kind of the announcement that a model call was answered by a fallback endpoint.
FALLBACK = "fallback"
# The error type of an answer the `decide` update refuses.
INVALID_ANSWER = "InvalidAnswer"
# What the signal `answer` and the update `decide` take. An answer written by hand with a
# wrong field reaches them as the dict it is: decoded as an ApprovalAnswer, it would fail
# in the SDK before them ("Failed decoding arguments", pydantic's report in its cause),
# where `answer_of` says in one line which field is wrong. A valid answer decodes as one.
HandWritten = ApprovalAnswer | dict[str, Any]
# The memo key of a run's own model deadline, in seconds (`starter.py ... --model-deadline`):
# a memo, so that no recipe's input model has to carry it.
MODEL_DEADLINE_MEMO = "durafact-model-deadline"
LONGEST_DEADLINE = timedelta(days=36_500)

M = TypeVar("M", bound=BaseModel)
R = TypeVar("R", bound=BaseModel)


def stamp(item: M, **values: Any) -> M:
    """`item` with those of `values` its type declares as fields.

    Recipes fill in bookkeeping fields (`goal`/`index`, `topic`/`round`) on what
    hooks return, so hooks never have to.
    """
    fields = type(item).model_fields
    update = {k: v for k, v in values.items() if k in fields}
    return item.model_copy(update=update) if update else item


def subject_text(subject: BaseModel, *fields: str) -> str:
    """What names a recipe's subject (a goal, a topic) in ids: the first of `fields`
    that holds a string, else the subject's JSON."""
    for field in fields:
        value = getattr(subject, field, None)
        if isinstance(value, str):
            return value
    return subject.model_dump_json()


def quote(text: str, limit: int = 60) -> str:
    """A short quoted label for activity summaries."""
    return repr(shorten(text, limit))


class Announcement(BaseModel):
    seq: int
    kind: str
    message: str
    status: str = Field(description="The recipe's status when this was announced.")
    data: dict[str, Any] | None = Field(
        default=None,
        description="What the line says, as data, for a front end: `tool_call` (an "
        "`action`), `tool_result` (an `observation`), `question`, `answer` (an `approval`).",
    )


class Cancellation(BaseModel):
    """The artifact `cancellation`: a run was cancelled (Temporal's cancellation, e.g.
    `durafact cancel ID --reason ...`), and why."""

    reason: str = ""

    def prompt_text(self) -> str:
        return f"canceled: {self.reason}" if self.reason else "canceled"


class Progress(BaseModel):
    """A page of announcements for a poller that has seen `offset` of them."""

    status: str
    events: list[Announcement]
    next_offset: int


class ModelCalls:
    """`ctx.llm`: each call is one `request_model` activity, named after the current scope."""

    def __init__(self, ctx: RecipeContext) -> None:
        self._ctx = ctx

    async def text(
        self,
        prompt: str,
        *,
        system: str | None = None,
        context: list[ContextRef] | None = None,
        summary: str | None = None,
        temperature: float | None = None,
        max_tokens: int | None = None,
    ) -> str:
        """Free text. `context` names ledger artifacts (ids or spans, see `ctx.refs`)
        whose text the model sees; `summary` is the activity's line in the Web UI.

        Example:
            ```python
            text = await ctx.llm.text("Name three sights.", system="Answer in one line.")
            ```
        """
        response = await self.request(
            self._messages(prompt, system, context),
            summary=summary,
            temperature=temperature,
            max_tokens=max_tokens,
        )
        return response.text

    async def structured(
        self,
        output: type[M],
        prompt: str,
        *,
        system: str | None = None,
        context: list[ContextRef] | None = None,
        summary: str | None = None,
        temperature: float | None = None,
        max_tokens: int | None = None,
    ) -> M:
        """An instance of `output`, produced under its JSON schema and validated; a
        reply that does not validate is asked again with the error (3 asks in all).
        List `output` in the recipe module's `OUTPUT_MODELS` so the worker knows it.

        Example:
            ```python
            class Cities(BaseModel):
                cities: list[str]

            cities = await ctx.llm.structured(Cities, f"{trip.days} cities for: {trip.text}")
            ```
        """
        response = await self.request(
            self._messages(prompt, system, context),
            output=output,
            summary=summary,
            temperature=temperature,
            max_tokens=max_tokens,
        )
        return output.model_validate(response.data)

    async def request(
        self,
        messages: list[ChatMessage],
        *,
        output: type[BaseModel] | None = None,
        conversation: ArtifactSpan | None = None,
        tools: list[str] | None = None,
        tool_specs: list[ToolSpec] | None = None,
        stop: list[str] | None = None,
        summary: str | None = None,
        temperature: float | None = None,
        max_tokens: int | None = None,
        endpoint: str | Sequence[str] | None = None,
        stream: StreamTo | None = None,
    ) -> LLMResponse:
        """The general form: explicit messages, optional structured output; for a tool
        loop or a chat, the run's `ChatTurn` artifacts (`conversation`, a reference read
        by the activity), the tools the model may call (by name, or `tool_specs` for tools
        the workflow runs itself) and stop sequences; `endpoint` names one of the worker's
        model endpoints, or several to fall back on in order (None: the run's
        `RecipeSettings.endpoints`, else `default`); `stream` publishes the reply as it is
        written. The run's budget is checked first, `max_tokens` counted as committed (see
        `durafact/_recipes/spending.py`). A call answered by a fallback endpoint leaves the
        artifact `fallback:{call}` and says so in the progress."""
        ctx = self._ctx
        await ctx.spending.before(max_tokens or 0)
        readable_id = ctx._next_activity_id("llm")
        names = [endpoint] if isinstance(endpoint, str) else list(endpoint or ctx.endpoints)
        request = LLMRequest(
            messages=[ctx._sent_once(message) for message in messages],
            output_type=type_path(output) if output else None,
            conversation=conversation,
            tools=tools or [],
            tool_specs=tool_specs or [],
            stop=stop,
            temperature=temperature,
            max_tokens=max_tokens,
            endpoint=names[0] if names else None,
            fallback=names[1:],
            fallback_after=ctx.fallback_after,
            stream=stream,
        )
        response: LLMResponse = await workflow.execute_activity(
            "request_model",
            request,
            result_type=LLMResponse,
            activity_id=ctx.temporal_id(readable_id),
            summary=summary or f"request model: {ctx.scope}",
            start_to_close_timeout=ctx.llm_timeout,
            schedule_to_close_timeout=ctx.model_deadline,
            heartbeat_timeout=ctx.llm_heartbeat_timeout,
            retry_policy=ctx.llm_retry,
        )
        ctx.spending.charge(response.usage, response.model)
        first = names[0].lower() if names else DEFAULT_ENDPOINT
        if response.endpoint != first:
            ctx._record_fallback(readable_id, first, response)
        return response

    @staticmethod
    def _messages(
        prompt: str, system: str | None, context: list[ContextRef] | None
    ) -> list[ChatMessage]:
        messages = [ChatMessage(role="system", content=system)] if system else []
        if context:
            messages.append(ChatMessage(role="user", content="Context:", context=context))
        messages.append(ChatMessage(role="user", content=prompt))
        return messages


class RecipeContext(Approvals):
    """The handle a recipe's hooks get, first argument of every hook: the only way a hook
    reaches the world, each call one activity with a stable id.

    What a recipe uses:

    - `ctx.llm.text(prompt, *, system=None, context=None, ...) -> str`: a free-text
      model call;
    - `ctx.llm.structured(Model, prompt, *, system=None, context=None, ...) -> Model`:
      an answer that must validate as `Model` (list `Model` in the module's
      `OUTPUT_MODELS`);
    - `ctx.llm.request(messages, *, output=None, tools=None, endpoint=None, ...)`: the
      full request, an `LLMResponse`;
    - `ctx.ledger`, the run's artifacts; `ctx.refs`, `ctx.announce`, `ctx.set_status`,
      `ctx.scoped`, `ctx.ask_approval`, `ctx.run_child`, `ctx.temporal_id` below.

    Example:
        ```python
        async def execute_step(
            self, ctx: RecipeContext, day: Day, history: list[DayPlan]
        ) -> DayPlan:
            ctx.announce(f"planning {day.city}")
            text = await ctx.llm.text(
                f"Plan a day in {day.city}.",
                system="You plan trips.",
                context=ctx.refs(history),  # the days before, read from the ledger
            )
            return DayPlan(text=text)
        ```
    """

    def __init__(
        self,
        recipe: str,
        llm_timeout: timedelta,
        llm_heartbeat_timeout: timedelta,
        llm_retry: RetryPolicy,
        opaque_ids: bool = False,
        *,
        model_deadline: timedelta,
        source_deadline: timedelta,
        run_deadline: timedelta | None = None,
    ) -> None:
        self.recipe = recipe
        self.opaque_ids = opaque_ids
        # How long a model call, an embedding search or a tool call may retry (the run's
        # own deadline when it was started with one); a source search or read retries
        # for `source_deadline` at most (see `Recipe`).
        self.run_deadline = run_deadline
        self.model_deadline = run_deadline or model_deadline
        self.source_deadline = min(source_deadline, self.model_deadline)
        self.ledger = Ledger()
        self.status = "starting"
        self.usage = Usage()
        self.spending = Spending(self)
        self.events: list[Announcement] = []
        # A chat publishes what its lines say as data on its stream (durafact/_recipes/chat.py).
        self.on_announce: Callable[[Announcement], None] | None = None
        self.scope = recipe
        self.llm_timeout = llm_timeout
        self.llm_heartbeat_timeout = llm_heartbeat_timeout
        self.llm_retry = llm_retry
        self.llm = ModelCalls(self)
        # The run's model endpoints in order, and when a call moves on (set by
        # `Recipe.execute` from the settings; see RecipeSettings).
        self.endpoints: list[str] = []
        self.fallback_after = FALLBACK_AFTER
        # Long message texts sent so far, by prompt id (see `_sent_once`).
        self._sent: set[str] = set()
        # DurafactStatus is the status's phase (`executing`, not `executing:2/3`), upserted
        # when the phase changes, the first time with DurafactRecipe (see `set_status`).
        self._phase = ""
        self._recipe_marked = False
        self._upserted_usage: Usage | None = None
        self._calls_in_scope = 0
        # The run a fork was forked from, and what it keeps of it (see `kept`).
        self.fork: Fork | None = None

    def _sent_once(self, message: ChatMessage) -> ChatMessage:
        """`message`, or, when an earlier call of this run sent its long content whole,
        a reference to that text (a `Prompt` artifact, made on its second use): a system
        prompt is stored in history with the first call, not with every call."""
        if len(message.content) < REPEAT_MIN_CHARS or message.content_from:
            return message
        artifact_id = prompt_id(message.content)
        if artifact_id not in self._sent:
            self._sent.add(artifact_id)
            return message
        if artifact_id not in self.ledger:
            self.ledger.create(artifact_id, Prompt(text=message.content))
        return message.model_copy(update={"content": "", "content_from": artifact_id})

    def _record_fallback(self, call: str, instead_of: str, response: LLMResponse) -> None:
        """Keep (`fallback:{call}`) and announce that model call `call` was answered by
        another endpoint than `instead_of`, the first one the run names."""
        record = ModelFallback(
            call=call, endpoint=response.endpoint, model=response.model, instead_of=instead_of
        )
        self.ledger.create(fallback_id(call), record)
        self.announce(
            f"{call} answered by endpoint {record.endpoint} (model {record.model}): "
            f"{instead_of} kept failing",
            kind=FALLBACK,
        )

    def start_fork(self, fork: Fork | None) -> None:
        """Make this run the `fork` its input names (None: it is no fork): its origin
        becomes the artifact `fork`, and its lifecycle takes the kept stages (`kept`)."""
        self.fork = fork
        if fork is not None:
            self.ledger.create(FORK_ID, fork.origin())
            self.announce(
                f"forked from {fork.workflow_id} (run {fork.run_id}): "
                f"{counted(len(fork.kept), 'stage')} kept, rerunning from {fork.rerun_from}",
                kind="fork",
            )

    def kept(self, stage: str, models: Iterable[type[BaseModel]]) -> list[Artifact[Any]] | None:
        """In a fork, the artifacts the forked run's `stage` made (the edits applied), put
        into this run's ledger with their ids, versions and links, each as the one of
        `models` its type names: the lifecycle takes them instead of running the stage,
        so no model call is made for them. None when the stage runs: this run is no fork,
        or the fork reruns it."""
        fork = self.fork
        if fork is None or stage not in fork.stages:
            return None
        recorded = fork.stages[stage]
        by_name = {model.__name__: model for model in models}
        made = []
        for artifact in recorded.all():
            model = by_name.get(artifact.type)
            if model is None:
                raise ApplicationError(
                    f"the fork keeps {artifact.id}, a {artifact.type}, which {stage} does not "
                    f"make here ({', '.join(by_name) or 'nothing'})",
                    type="InvalidFork",
                    non_retryable=True,
                )
            data = (
                artifact.data
                if isinstance(artifact.data, model)
                else model.model_validate(artifact.data)
            )
            made.append(self.ledger.create(artifact.id, data, version=artifact.version))
        for link in recorded.links:
            if link.target in self.ledger:
                self.ledger.link(link.source, link.relation, link.target)
        for artifact in made:
            if artifact.id in fork.edited:
                self.ledger.link(artifact.id, FORKED_FROM, FORK_ID)
        self.announce(f"kept {stage} from {fork.workflow_id} ({counted(len(made), 'artifact')})")
        return made

    def temporal_id(self, readable: str) -> str:
        """The id Temporal stores for an activity or child workflow named `readable`: the
        readable id itself, or (when the run's payloads are encrypted, see
        `OPAQUE_IDS_MEMO`) its opaque form, so no text of the run is stored in plain.
        Pass it every id you give Temporal yourself (a child workflow's, an activity's)."""
        return opaque_id(readable) if self.opaque_ids else readable

    def _child_memo(self) -> dict[str, Any] | None:
        """The memo a child workflow gets: this run's opaque ids and its own model deadline."""
        memo: dict[str, Any] = {OPAQUE_IDS_MEMO: True} if self.opaque_ids else {}
        if self.run_deadline is not None:
            memo[MODEL_DEADLINE_MEMO] = self.run_deadline.total_seconds()
        return memo or None

    async def run_child(
        self, run: Any, input: BaseModel, *, id: str, result_type: type[R], summary: str
    ) -> R:
        """The result of a child recipe workflow (`run`, e.g. `ReActWorkflow.run`) started
        with this run's memo (`_child_memo`), and with what is left of this run's budget
        when it has one (the child's input is then a `RecipeSettings`). What the child
        spent, its result's `usage` or the `Spent` of its failure, is charged to this run
        when it ends; a child its budget stopped stops this run too.

        Example:
            ```python
            answer = await ctx.run_child(
                ReActWorkflow.run,
                ReActInput(question=step.text, tools=["calculator"]),
                id=ctx.temporal_id(f"{workflow.info().workflow_id}/step:{step.index}"),
                result_type=ReActResult,
                summary=f"agent for step {step.index}",
            )
            ```
        """
        if "usage" not in result_type.model_fields:
            raise TypeError(
                f"{result_type.__name__} has no `usage`: a child started with ctx reports "
                "what it spent in its result"
            )
        await self.spending.before()
        budget = self.spending.for_child()
        if budget is not None:
            if not isinstance(input, RecipeSettings):
                raise TypeError(f"{type(input).__name__} is no RecipeSettings: it takes no budget")
            input = input.model_copy(update={"budget": budget})
        try:
            result = await workflow.execute_child_workflow(
                run,
                input,
                id=id,
                memo=self._child_memo(),
                result_type=result_type,
                static_summary=summary,
            )
        except ChildWorkflowError as exc:
            self.spending.child_failed(exc, id)
            raise
        self.spending.charge(result.usage)  # type: ignore[attr-defined]
        return result

    def refs(self, *items: BaseModel | Sequence[BaseModel]) -> list[ContextRef]:
        """Context references (`ctx.llm.text(..., context=ctx.refs(...))`) to artifacts
        of this run, named by the objects a hook was given (a step's history, a draft).

        The model activity reads their texts from the ledger, so a text is stored in
        history once, however many prompts use it. A run of artifacts that are the
        first of their id prefix in creation order (every earlier result of a plan)
        becomes one constant-size `ArtifactSpan`, so a prompt's input does not grow
        with the run. An object that is not in the ledger is a `LookupError`.

        Example:
            ```python
            text = await ctx.llm.text("Write the final answer.", context=ctx.refs(results))
            ```
        """
        ids: list[str] = []
        for item in items:
            for one in [item] if isinstance(item, BaseModel) else item:
                artifact_id = self.ledger.id_of(one)
                if artifact_id is None:
                    raise LookupError(f"{type(one).__name__} is not an artifact of this run")
                ids.append(artifact_id)
        if len(ids) > 1:
            prefix = ids[0].rsplit(":", 1)[0] + ":"
            span = ArtifactSpan(prefix=prefix, count=len(ids))
            if (
                all(i.startswith(prefix) for i in ids)
                and [a.id for a in self.ledger.select(span)] == ids
            ):
                return [span]
        return list(ids)

    @contextmanager
    def scoped(self, artifact_id: str) -> Iterator[None]:
        """Name the activities a hook starts after the artifact it is producing: the
        model calls inside are `llm:{artifact_id}`, then `llm:{artifact_id}#2`, ...,
        stable across replays and retries. The lifecycles scope every hook they call;
        scope a call of your own that makes an artifact outside a hook.

        Example:
            ```python
            with ctx.scoped("summary:week"):
                text = await ctx.llm.text("Sum up the week.")  # activity llm:summary:week
            ctx.ledger.create("summary:week", Summary(text=text))
            ```
        """
        outer, outer_calls = self.scope, self._calls_in_scope
        self.scope, self._calls_in_scope = artifact_id, 0
        try:
            yield
        finally:
            self.scope, self._calls_in_scope = outer, outer_calls

    def _next_activity_id(self, verb: str) -> str:
        # The first call in a scope gets the plain id (`llm:step:goal:0`); a hook that
        # makes several calls gets `#2`, `#3`: still stable across replays and retries.
        self._calls_in_scope += 1
        return activity_id(verb, self.scope, self._calls_in_scope)

    def announce(
        self, message: str, kind: str = "info", data: dict[str, Any] | None = None
    ) -> None:
        """A progress line: `durafact` prints it live, the console and the `progress`
        query show it, and the Web UI's current details carry it. `kind` sorts it
        (`info`, `warning`, `status`, ...); it is workflow state, so it costs no activity.

        Example:
            ```python
            ctx.announce(f"{len(days)} days planned")
            ctx.announce("the model left out a city; asking again", kind="warning")
            ```
        """
        line = Announcement(
            seq=len(self.events), kind=kind, message=message, status=self.status, data=data
        )
        self.events.append(line)
        if data is not None and self.on_announce is not None:
            self.on_announce(line)
        workflow.set_current_details(f"**{self.status}**: {message}")

    def set_status(
        self, status: str, message: str | None = None, *, phase: str = "", final: bool = False
    ) -> None:
        """The recipe's status (the `status` query, the progress lines, the Web UI's
        current details) and its phase, `DurafactStatus`: `phase`, or the status's
        first word (up to a `:` or a space).

        While a question waits, the status stays `awaiting_approval`, whatever work goes
        on beside it (the other calls of a turn), so that `pending`, the inbox and the
        run's page list the question until it is answered; `message` is announced all
        the same. A `final` status (the run ends) is set even so.

        Example:
            ```python
            ctx.set_status(f"drafting:{n}/{total}", f"draft {n} of {total}")
            # DurafactStatus is `drafting`; `durafact list --status drafting` finds the run
            ```
        """
        if (
            not final
            and status != AWAITING_APPROVAL
            and self.status == AWAITING_APPROVAL
            and self.pending_questions()
        ):
            self.announce(message or status, kind="status")
            return
        self.status = status
        phase = phase or re.split(r"[: ]", status, maxsplit=1)[0]
        if phase != self._phase:
            self._phase = phase
            self._upsert_phase()
        self.announce(message or status, kind="status")

    def _canceled(self, reason: str) -> None:
        """Record the cancellation and its reason, and set the status `canceled`."""
        cancellation = Cancellation(reason=reason)
        if CANCELLATION_ID not in self.ledger:
            self.ledger.create(CANCELLATION_ID, cancellation)
        self.set_status(CANCELED, cancellation.prompt_text(), final=True)

    def _settle_attributes(self) -> None:
        """As the run ends: DurafactRecipe, if no status has carried it yet, and the
        usage, if a model call came after the last phase (an approval's follow-up, a
        recipe of yours that sets no final status), so that a closed run's
        DurafactTokens and DurafactCost are its totals."""
        if not self._recipe_marked:
            self._upsert_phase()
        else:
            self.upsert_usage()

    def upsert_usage(self) -> None:
        """DurafactTokens and DurafactCost as of now, if a model call came since they were
        last upserted: for a run whose phase stays the same while it spends (a chat's
        turns), which `set_status` alone would leave as they were when the phase began."""
        if self._recipe_marked and self.usage != self._upserted_usage:
            workflow.upsert_search_attributes(self._usage_updates())

    def _upsert_phase(self) -> None:
        pairs = [STATUS_ATTRIBUTE.value_set(self._phase)] if self._phase else []
        if not self._recipe_marked:
            pairs.insert(0, RECIPE_ATTRIBUTE.value_set(self.recipe))
            self._recipe_marked = True
        workflow.upsert_search_attributes([*pairs, *self._usage_updates()])

    def _usage_updates(self) -> list[SearchAttributeUpdate[Any]]:
        """DurafactTokens as of now, and DurafactCost when it changed since the last upsert
        (unset while the cost is unknown: a Double holds no "unknown", and 0 would be a
        lie). An unchanged cost is left out: with an unpriced model it stays unknown for
        the whole run, and each upsert is kept in history."""
        last, usage = self._upserted_usage, self.usage
        self._upserted_usage = usage
        updates: list[SearchAttributeUpdate[Any]] = [TOKENS_ATTRIBUTE.value_set(usage.total_tokens)]
        if last is None or usage.cost != last.cost:
            updates.append(
                COST_ATTRIBUTE.value_unset()
                if usage.cost is None
                else COST_ATTRIBUTE.value_set(float(usage.cost))
            )
        return updates


def type_arguments(cls: type, base: type) -> tuple[Any, ...]:
    """The types `cls` gives the generic `base` (`PlanExecute[Goal, PlanStep, ...]`), or
    () when it does not give them all: the first subscripted `base` among its classes."""
    for klass in cls.__mro__:
        for origin in getattr(klass, "__orig_bases__", ()):
            if typing.get_origin(origin) is base:
                found = typing.get_args(origin)
                return found if all(isinstance(a, type) for a in found) else ()
    return ()


def run_cancelled(exc: BaseException) -> bool:
    """Whether `exc` is Temporal's cancellation of this run (directly, or as the cause
    of an activity or child that it cancelled)."""
    return is_cancelled_exception(exc) and workflow.cancellation_reason() is not None


def reraise_cancellation(exc: BaseException) -> None:
    """For code that takes a failed call as an outcome (a failed search is recorded, a
    failed chat turn rolled back): the run's cancellation goes on up instead, as
    asyncio's, which no `except Exception` on the way takes for a failure."""
    if run_cancelled(exc):
        raise asyncio.CancelledError(workflow.cancellation_reason()) from exc


def run_deadline() -> timedelta | None:
    """The model deadline the run was started with (`MODEL_DEADLINE_MEMO`), if any.

    Anything but a number of seconds from 1 to 100 years is ignored (the recipe's
    default holds): a memo set by another client must not fail the workflow task forever."""
    seconds = workflow.memo_value(MODEL_DEADLINE_MEMO, None)
    number = isinstance(seconds, int | float) and not isinstance(seconds, bool)
    if number and 1 <= seconds <= LONGEST_DEADLINE.total_seconds():
        return timedelta(seconds=seconds)
    return None


In = TypeVar("In", bound=BaseModel)
Out = TypeVar("Out")


class RecipeSettings(BaseModel):
    """The limits of one run: the base of every recipe's settings model.

    Each lifecycle base names its own subclass (`Recipe.settings_model`); limits
    every recipe shares go here."""

    budget: Budget | None = Field(
        default=None,
        description="What the run's model calls, its children's included, may use: tokens, "
        "cost, and whether to fail or ask a person when it is spent (None: no limit).",
    )
    endpoints: list[str] = Field(
        default_factory=list,
        description="The worker's model endpoints for this run's calls, in order (none: "
        "`default`, the worker's OPENAI_BASE_URL). A call that keeps failing retryably on "
        "one for `fallback_after` moves to the next, within its own retries, so it is "
        "answered once; a refusal (4xx) never moves. Names, never URLs: the worker "
        "configures them (DURAFACT_ENDPOINT_<NAME>=URL, each with its own key).",
    )
    fallback_after: timedelta = Field(
        default=FALLBACK_AFTER,
        gt=timedelta(0),
        description="How long a call fails on one endpoint before it moves to the next.",
    )
    fork: Fork | None = Field(
        default=None,
        # Left out of the input when None: a run that is no fork sends what it always did.
        exclude_if=lambda fork: fork is None,
        description="Set by `durafact fork` (durafact/_service/forks.py): the finished run this "
        "one is forked from, and the artifacts it keeps of it. Its recipe must fork "
        "(`Recipe.forks`).",
    )

    @field_validator("endpoints")
    @classmethod
    def _endpoint_names(cls, names: list[str]) -> list[str]:
        return checked_endpoints(names)


class Recipe(Generic[In, Out]):
    """Base of every recipe workflow, built-in or yours.

    A lifecycle base (`PlanExecute`, `ReflectionLoop`, `AnswerFlow`, `Research`,
    `ReAct`) overrides `lifecycle` with the story of its run and calls the hooks a
    subclass writes; a one-off recipe overrides `lifecycle` itself. `execute(input)`
    marks the run in the `DurafactRecipe` search attribute, runs the lifecycle, and
    sets the status `failed` when it raises. Hooks get the `RecipeContext` as their
    first argument and reach the world only through it. Every recipe workflow
    answers the queries `status`, `usage`, `progress`, `artifacts` and `pending_questions`,
    the signal `answer` and the update `decide`.

    Limits. A run's limits (how many steps, rounds, repairs, turns, documents) are
    one `settings_model` (a `RecipeSettings`), and the lifecycle reads them through
    one hook, `settings(input)`. By default it is the input itself when the input is
    an instance of `settings_model` (a ready workflow's input model subclasses its
    recipe's settings model, so each run sets its own), else the model's defaults.
    Change them per recipe by overriding the hook
    (`return ReflectionSettings(accept_at=0.9)`), or per run by making your input
    model subclass the settings model. Every settings model has the run's `budget`.
    """

    recipe_name: ClassVar[str] = ""
    """The `DurafactRecipe` search attribute, what `durafact list` and the console show:
    a lifecycle's name (`plan_execute`, ...) for its subclasses; empty, as a one-off
    recipe leaves it, the workflow type."""
    settings_model: ClassVar[type[RecipeSettings]] = RecipeSettings
    llm_timeout: ClassVar[timedelta] = timedelta(minutes=2)
    # The activity heartbeats while it waits for the model: a worker that dies
    # mid-call is noticed after this long, and the call moves to another worker.
    llm_heartbeat_timeout: ClassVar[timedelta] = timedelta(seconds=10)
    # A model call that fails for a transient reason (unreachable, 429, 5xx, timeout) is
    # tried again with capped backoff, or after the endpoint's `retry-after`, with no limit
    # on attempts, until `model_deadline` after it was first scheduled; only then does the
    # run fail (and `starter.py resume ID` continues it). A day, because an outage, a
    # rate-limit storm or a night nobody watches must not end a run whose earlier calls
    # cost money, while a waiting retry costs one request per 30 s at most and `status`
    # shows each one. `--model-deadline` sets it per run. A request error (400, 401, ...)
    # fails at once, whatever the deadline.
    llm_retry: ClassVar[RetryPolicy] = RetryPolicy(
        initial_interval=timedelta(seconds=1),
        backoff_coefficient=2.0,
        maximum_interval=timedelta(seconds=30),
        maximum_attempts=0,
    )
    model_deadline: ClassVar[timedelta] = timedelta(hours=24)
    # A source search or document read that keeps failing is recorded as a failure and
    # the run goes on without it, so it gives up sooner: minutes outlast a rate-limit
    # storm or a restarting search service, and one dead page never holds a run for
    # long. Never longer than the model deadline. A search that embeds (an `embedding`
    # source, files with an `embedding_model`) talks to a model endpoint: the model
    # deadline applies.
    source_deadline: ClassVar[timedelta] = timedelta(minutes=5)

    # What the front doors may do with its runs. The registry reads these
    # (durafact/_runtime/registry.py), and the command line, the HTTP API and the
    # console read the registry: a recipe of yours that declares them gets the same.
    command: ClassVar[Command | None] = None
    """Its own command line, `durafact NAME ARGUMENT [OPTIONS]` (durafact/_core/commands.py);
    a subclass has its own or none."""
    steerable: ClassVar[bool] = False
    """It takes a person's note while it runs: the update `steer` (`durafact steer`)."""
    stoppable: ClassVar[bool] = False
    """The turn it is answering can be stopped: the update `stop`."""
    chat: ClassVar[bool] = False
    """A conversation, which takes messages (the update `send`) and never ends by itself:
    `durafact chat` and `/api/chats` talk to it, and a note goes as a message."""
    correctable: ClassVar[type[BaseModel] | None] = None
    """The facts a rejection may correct (`approve --reject --set FIELD=VALUE`): their model."""
    step_agents: ClassVar[bool] = False
    """Each step runs an agent, the child workflow `{id}/{step}`; a note goes to it."""
    upgrade_on_continue_as_new: ClassVar[bool] = False
    """How its runs meet a new version of the code, on workers of a deployment
    (`DurafactPlugin(deployment=..., build_id=...)`, durafact/_runtime/versioning.py).
    Every run is pinned: it finishes on the version it started on, so a change to the
    recipe needs no `workflow.patched` for the runs in flight, and a new run starts on
    the deployment's current version. False (the default): a run that continues as new
    stays on its version too. True (`ChatWorkflow`, `ReActWorkflow`): a run continues as
    new at its next turn once a new version is current, and the next run starts on
    that version; the carried input must still read in the new code. (To move every
    task of a recipe's runs to the current version instead, declare it
    `@workflow.defn(versioning_behavior=VersioningBehavior.AUTO_UPGRADE)`: then a change
    within one run needs `workflow.patched`.)"""
    forks: ClassVar[bool] = False
    """A finished run can be forked from an edited artifact (`durafact fork`): the
    recipe says how its runs are built (`fork_rules`), and its lifecycle takes a kept
    stage's artifacts (`RecipeContext.kept`) instead of running it."""

    show_result: ClassVar[Callable[[Any, Ledger | None], str] | None] = None
    """How a completed run's result reads on the command line (default: as JSON): a
    static method `show_result(result, ledger)` that returns the text; `ledger` is the
    run's (the texts its result names), None when no worker answered for it. A subclass
    has its own or none (it may return another result)."""

    def __init__(self) -> None:
        self._ctx = RecipeContext(
            self.recipe_name or workflow.info().workflow_type,
            self.llm_timeout,
            self.llm_heartbeat_timeout,
            self.llm_retry,
            opaque_ids=bool(workflow.memo_value(OPAQUE_IDS_MEMO, False, type_hint=bool)),
            model_deadline=self.model_deadline,
            source_deadline=self.source_deadline,
            run_deadline=run_deadline(),
        )

    async def execute(self, input: In) -> Out:
        """Run the lifecycle on `input`: what a recipe's `@workflow.run` returns."""
        ctx = self._ctx
        try:
            limits = self.settings(input)
            ctx.start_fork(input.fork if isinstance(input, RecipeSettings) else None)
            ctx.spending.start(limits.budget)
            ctx.endpoints, ctx.fallback_after = limits.endpoints, limits.fallback_after
            return await self.lifecycle(ctx, input)
        except BaseException as exc:
            # Temporal's cancellation reached the run (an activity in flight gets it on its
            # next heartbeat; a child workflow is cancelled with it): say so, then end
            # CANCELED with the ledger as it is.
            if run_cancelled(exc):
                ctx._canceled(workflow.cancellation_reason() or "")
                raise
            if not isinstance(exc, Exception):
                raise
            if ctx.status != OVER_BUDGET:
                ctx.set_status("failed", final=True)
            # A child's failure says what it spent, for its parent to charge (run_child).
            if isinstance(exc, FailureError) and workflow.info().parent and not spent_of(exc):
                raise with_spent(exc, ctx.usage) from exc
            raise
        finally:
            # Not when the worker drops the run from its cache: its coroutine is then
            # closed outside the workflow's event loop, and nothing is recorded.
            if workflow.in_workflow():
                ctx._settle_attributes()

    async def lifecycle(self, ctx: RecipeContext, input: In) -> Out:
        raise NotImplementedError(f"{type(self).__name__} defines no lifecycle")

    @classmethod
    def fork_rules(cls, ledger: Ledger) -> ForkRules | None:
        """How the run whose artifacts are `ledger` was built: its stages, the stage that
        made each artifact, and what a fork may edit (durafact/_core/forks.py); None
        when a run of this recipe cannot be forked. Read outside the workflow, by
        `durafact fork`, only when the recipe `forks`."""
        return None

    def settings(self, input: In) -> RecipeSettings:
        """This run's limits: `input` when it is a `settings_model`, else its defaults."""
        return input if isinstance(input, self.settings_model) else self.settings_model()

    @property
    def ledger(self) -> Ledger:
        """The run's artifacts (what the `artifacts` query returns)."""
        return self._ctx.ledger

    @property
    def usage(self) -> Usage:
        """Tokens used by the run's model calls so far."""
        return self._ctx.usage

    @workflow.query
    def status(self) -> str:
        return self._ctx.status

    @workflow.query(name="usage")
    def usage_so_far(self) -> Usage:
        """The `usage` query: what the run's model calls used, up to now (the search
        attributes DurafactTokens and DurafactCost hold it as of the last phase)."""
        return self._ctx.usage

    @workflow.query
    def progress(self, offset: int = 0) -> Progress:
        events = self._ctx.events[max(offset, 0) :]
        return Progress(status=self._ctx.status, events=events, next_offset=offset + len(events))

    @workflow.query
    def artifacts(self) -> Ledger:
        return self._ctx.ledger

    @workflow.query
    def pending_questions(self) -> list[ApprovalQuestion]:
        return self._ctx.pending_questions()

    @workflow.signal
    def answer(self, answer: HandWritten) -> None:
        """A person's answer, fire and forget (`starter.py approve`). One that cannot be
        taken (see `validate_answer`), or is no `ApprovalAnswer`, is dropped with a
        warning announcement."""
        try:
            self._ctx.receive_answer(answer_of(answer))
        except ValueError as refusal:
            workflow.logger.warning("answer dropped: %s", refusal)
            self._ctx.announce(f"answer dropped: {refusal}", kind="warning")

    @workflow.update
    def decide(self, answer: HandWritten) -> ApprovalOutcome:
        """A person's answer to a named question (an `ApprovalAnswer`); returns the outcome.

        A refusal fails the update, before anything is written to history, with an
        `ApplicationError` of type `InvalidAnswer` whose message says why in one line:
        `decide: 'approve' is not a field of an answer (did you mean 'approved'?)`,
        `no question 'approval:x:9' was asked`."""
        try:
            return self._ctx.receive_answer(answer_of(answer))
        except ValueError as refusal:  # only if the state changed since the validator ran
            raise ApplicationError(str(refusal), type=INVALID_ANSWER, non_retryable=True) from None

    @decide.validator
    def _validate_decide(self, given: HandWritten) -> None:
        # Runs before the update is accepted: a refusal writes nothing to history.
        try:
            answer = answer_of(given)
        except ValueError as mistake:
            raise ApplicationError(
                f"decide: {mistake}", type=INVALID_ANSWER, non_retryable=True
            ) from None
        if answer.question_id is None:
            raise ApplicationError(
                "decide needs a question id (the signal `answer` takes the oldest pending)",
                type=INVALID_ANSWER,
                non_retryable=True,
            )
        try:
            self._ctx.check_answer(answer)
        except ValueError as refusal:
            raise ApplicationError(str(refusal), type=INVALID_ANSWER, non_retryable=True) from None

    @workflow.query
    def context_messages(self, conversation: ArtifactSpan) -> list[ChatTurn]:
        """The conversation's `ChatTurn` artifacts, for the model activity."""
        return [a.typed(ChatTurn).data for a in self._ctx.ledger.select(conversation)]

    @workflow.query
    def context_texts(self, refs: list[ContextRef]) -> list[ContextText]:
        """The prompt text of the referenced artifacts, for the model activity."""
        ledger = self._ctx.ledger
        return [ContextText(id=a.id, text=a.text()) for ref in refs for a in ledger.select(ref)]
