"""AnswerFlow: answer a batch of questions, repair only the answers that fail, and end
every item accepted, fallback or blocked.

The recipe owns the batch's validation, the rounds, the budget gate, the artifacts,
the links and the status (the engine's rules, `durafact._core.answer_flow`); you write the
hooks that need judgement, and a three-line `run`:

    @workflow.defn
    class Glossary(AnswerFlow[Terms, Definitions]):
        @workflow.run
        async def run(self, terms: Terms) -> Definitions:
            return await self.execute(terms)

        def questions(self, terms): ...                   # -> {input id: question}
        async def generate(self, ctx, items, repairs, previous): ...  # -> {item id: value}
        def check(self, item, value): ...                 # -> AnswerCheck
        async def finish(self, ctx, terms, results): ...  # -> Definitions

Optional hooks and their defaults: `items(batch, questions)` (one `ready` item per
question, same id, `data` = the question), `review(ctx, pairs)` (none: nothing is
reviewed), `fallback(item, issues)` (not handled: blocked), `can_invoke(ctx)`
(yes while the run's budget lasts) and `observe(ctx, stage_id, results)` (nothing).

Limits: `settings(batch)`, an `AnswerFlowSettings`: `max_items` (20), `max_repairs`
(1), `review_policy` ("optional") and `budget` (every recipe's `Budget`; None). By
default the batch when it subclasses `AnswerFlowSettings` (as `AnswerBatchInput`
does), else the defaults; override `settings` to set them otherwise. The engine's
rules check them with the batch. `budget_tokens: N`, what a batch said before budgets
were every recipe's, still reads as `budget: {"tokens": N}`.

Guarantees. A batch that breaks the rules (`validate_answer_batch`, an
`AnswerBatchError` from `questions` or `items`, or a flow that cannot be defined,
such as `required` without a `review`) fails the run at once with the non-retryable
`ApplicationError` type `InvalidAnswerBatch`, before anything is stored or asked.
Round 0 generates every `ready` item; each of at most `max_repairs` repair rounds
regenerates only the items that failed, given their issues (`repairs`) and their
rejected values (`previous`), so a passing item is never generated again. `check`
(sync, deterministic; raising is `CHECK_ERROR`) judges each value in workflow code;
`review` judges the round's values that passed it. `can_invoke` is asked before
every `generate` and `review`; a no sends what waits to fallback with `BUDGET`. The
default says no once a `fail` budget is spent, so AnswerFlow keeps the seed's graceful
stop (every item still ends once; the run completes with `DurafactStatus`
`over_budget`) where other recipes fail `over_budget`; an `ask` budget asks before the
call, and a refusal ends the run `over_budget` as in every recipe.
Unavailable items, items still failing after the last round and items the budget
stopped go to `fallback`: handled -> `fallback` with its value, not handled ->
`blocked`; the rest end `accepted`. Every item ends exactly once; `observe` sees each
stage (`generate:0`, `repair:1`, ..., `final`) and its failures change nothing.

Artifacts: `question:{input id}` per question; `answer:{item}:{round}` per value
`generate` returned (values are pydantic models), linked `answers` -> its questions
and `revises` -> the item's previous answer; `review:answer:{item}:{round}` per
verdict (the `AnswerCheck`), linked `reviews` -> the answer; `outcome:{item}` (its
`AnswerResult`) linked `answers` -> its questions and `based_on` -> the accepted
answer or `last_attempt` -> the last rejected one. A hook gives the model earlier
answers as `context=ctx.refs(previous[item.id])`, so each is stored in history once.
The model activities are `llm:generate:0`, `llm:repair:{r}`, `llm:review:{r}` and
`llm:final` (a `finish` that asks the model).

Status: `answering`; after each round `round:{r} accepted={a}
failing={f}` (with `fallback={n}` after `accepted` once items ended as fallback);
then `final accepted={a} fallback={f} blocked={b}`; `failed` when the run fails.
`DurafactStatus` holds the phase: `answering`, `round`, `final`.

`AnswerFlowWorkflow`, at the bottom, is the ready one: questions with sources in,
one grounded answer, a fallback or a block per question out.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Mapping
from typing import Any, ClassVar, Literal, TypeVar, cast

from pydantic import BaseModel, Field, ValidationError, model_validator
from temporalio import workflow
from temporalio.exceptions import ActivityError, ApplicationError

from durafact._core.answer_flow import (
    BUDGET,
    REVIEW_POLICIES,
    AnswerBatchError,
    AnswerCheck,
    AnswerFlowDefinitionError,
    AnswerIssue,
    AnswerItem,
    AnswerResult,
    RecoveryResult,
    ReviewPolicy,
    define_answer_flow,
    validate_answer_batch,
)
from durafact._core.grounding import grounding_issues
from durafact._core.ids import (
    FINAL_STAGE,
    answer_review_id,
    answer_stage,
    item_answer_id,
    outcome_id,
    question_id,
    review_scope,
)
from durafact._core.ledger import ArtifactRef, Ledger
from durafact._core.llm import ContextRef, Usage
from durafact._core.ready_commands import ANSWER
from durafact._core.text import counted, indent, shorten
from durafact._recipes.recipe import (
    Recipe,
    RecipeContext,
    RecipeSettings,
    reraise_cancellation,
)
from durafact._recipes.spending import OVER_BUDGET

In = TypeVar("In", bound=BaseModel)
Out = TypeVar("Out")

# The error type of a batch the recipe refuses before it starts.
INVALID_ANSWER_BATCH = "InvalidAnswerBatch"
MAX_REPAIRS = 10  # a sanity bound on rounds; the token budget bounds cost


class AnswerFlowSettings(RecipeSettings):
    """The limits of an AnswerFlow run. Types only: the engine's rules (and, for a batch
    file, `check_answer_batch`) check the values, with messages that name the rule."""

    max_repairs: int = Field(default=1, description=f"Repair rounds, 0 to {MAX_REPAIRS}.")
    review_policy: ReviewPolicy = "optional"
    max_items: int = Field(default=20, description="The most questions one batch may hold.")

    @model_validator(mode="before")
    @classmethod
    def _budget_tokens(cls, data: Any) -> Any:
        """`budget_tokens: N` (AnswerFlow's token limit before every recipe had a budget)
        is `budget: {"tokens": N}`: inputs and histories from then still read."""
        if not isinstance(data, dict) or "budget_tokens" not in data:
            return data
        data = dict(data)
        tokens = data.pop("budget_tokens")
        if tokens is None:
            return data
        if not _is_int(tokens) or tokens < 1:
            raise ValueError(f"budget_tokens must be a positive integer or absent, got {tokens!r}")
        if data.get("budget") is not None:
            raise ValueError("give budget or budget_tokens (the older form), not both")
        data["budget"] = {"tokens": tokens}
        return data


class AnswerFlow(Recipe[In, Out]):
    """Questions in -> generate, check, review and repair in rounds -> one ending per item."""

    recipe_name = "answer_flow"
    settings_model = AnswerFlowSettings

    def __init__(self) -> None:
        super().__init__()
        self._round = -1  # the round of the last generate call
        self._latest: dict[str, str] = {}  # item id -> the id of its latest answer

    # --- hooks ------------------------------------------------------------------------

    def questions(self, batch: In) -> Mapping[str, BaseModel]:
        """The batch's questions by input id, in order; each is stored as `question:{id}`."""
        raise NotImplementedError

    def items(self, batch: In, questions: Mapping[str, BaseModel]) -> list[AnswerItem]:
        """The units of answering, covering every question; by default one `ready` item
        per question. An item without a source goes to `fallback` without being generated."""
        return [AnswerItem(id=i, input_ids=[i], data=q) for i, q in questions.items()]

    def settings(self, batch: In) -> AnswerFlowSettings:
        """This run's limits (see `Recipe.settings`)."""
        return cast(AnswerFlowSettings, super().settings(batch))

    async def generate(
        self,
        ctx: RecipeContext,
        items: list[AnswerItem],
        repairs: dict[str, list[AnswerIssue]] | None,
        previous: dict[str, Any] | None,
    ) -> Mapping[str, BaseModel]:
        """A value per item id. Round 0: `repairs` and `previous` are None; a repair
        round gets only the failing items, their issues and their rejected values."""
        raise NotImplementedError

    def check(self, item: AnswerItem, value: Any) -> AnswerCheck:
        """The local verdict on one value: synchronous, deterministic, no model."""
        raise NotImplementedError

    async def review(
        self, ctx: RecipeContext, pairs: list[tuple[AnswerItem, Any]]
    ) -> Mapping[str, AnswerCheck]:
        """Verdicts, by item id, on the round's values that passed `check`. A recipe that
        does not override it is not reviewed (and cannot run with `required`)."""
        raise NotImplementedError

    def fallback(self, item: AnswerItem, issues: list[AnswerIssue]) -> RecoveryResult:
        """What to do with an item that cannot be accepted; by default, block it."""
        return RecoveryResult(handled=False)

    def can_invoke(self, ctx: RecipeContext) -> bool:
        """May the next `generate` or `review` run? By default, while the run's budget
        lasts (see `durafact/_recipes/spending.py`); always, without one."""
        return ctx.spending.allows()

    async def observe(self, ctx: RecipeContext, stage_id: str, results: list[AnswerResult]) -> None:
        """Every item's result so far after a stage (items still failing show `blocked`)."""

    async def finish(self, ctx: RecipeContext, batch: In, results: list[AnswerResult]) -> Out:
        """The run's output from one result per item, in the items' order."""
        raise NotImplementedError

    # --- the lifecycle ----------------------------------------------------------------

    async def lifecycle(self, ctx: RecipeContext, batch: In) -> Out:
        try:
            questions = dict(self.questions(batch))
            items = list(self.items(batch, questions))
            limits = self.settings(batch)
            engine = define_answer_flow(
                max_items=limits.max_items,
                max_repairs=limits.max_repairs,
                review_policy=limits.review_policy,
                can_invoke=self.can_invoke,
                generate=self._generate,
                check=self.check,
                review=self._review if type(self).review is not AnswerFlow.review else None,
                fallback=self.fallback,
                observe=self._observe,
            )
            validate_answer_batch(list(questions), items, limits.max_items)
        except (AnswerBatchError, AnswerFlowDefinitionError) as exc:
            ctx.announce(f"invalid batch: {exc}", kind="error")
            raise ApplicationError(
                str(exc), type=INVALID_ANSWER_BATCH, non_retryable=True
            ) from None

        for input_id, question in questions.items():
            ctx.ledger.create(question_id(input_id), question)
        unavailable = sum(item.source_status != "ready" for item in items)
        ctx.set_status(
            "answering",
            f"answering {counted(len(items), 'item')}"
            + (f" ({unavailable} without a source)" if unavailable else ""),
        )
        results = await engine.run(list(questions), items, ctx)
        for item, result in zip(items, results, strict=True):
            self._store_outcome(ctx.ledger, item, result)
        with ctx.scoped(FINAL_STAGE):
            return await self.finish(ctx, batch, results)

    # The engine calls these in place of the hooks, with the hooks' arguments: each runs
    # its hook in a scope named after the round and stores what the round produced.

    async def _generate(
        self,
        ctx: RecipeContext,
        items: list[AnswerItem],
        repairs: dict[str, list[AnswerIssue]] | None,
        previous: dict[str, Any] | None,
    ) -> Mapping[str, Any]:
        self._round += 1
        stage = answer_stage(self._round)
        ctx.announce(f"round {self._round}: {stage.split(':')[0]} {counted(len(items), 'item')}")
        with ctx.scoped(stage):
            values = await self.generate(ctx, items, repairs, previous)
        if isinstance(values, Mapping):  # anything else fails the run in the engine
            for item in items:
                if item.id in values:
                    self._store_answer(ctx.ledger, item, values[item.id])
        return values

    def _store_answer(self, ledger: Ledger, item: AnswerItem, value: Any) -> None:
        if not isinstance(value, BaseModel):
            raise TypeError(
                f"generate's value for item {item.id!r} is a {type(value).__name__}: "
                "values are pydantic models, stored as artifacts"
            )
        aid = item_answer_id(item.id, self._round)
        ledger.create(aid, value)
        for input_id in item.input_ids:
            ledger.link(aid, "answers", question_id(input_id))
        if item.id in self._latest:
            ledger.link(aid, "revises", self._latest[item.id])
        self._latest[item.id] = aid

    async def _review(
        self, ctx: RecipeContext, pairs: list[tuple[AnswerItem, Any]]
    ) -> Mapping[str, Any]:
        ctx.announce(f"round {self._round}: review {counted(len(pairs), 'item')}")
        with ctx.scoped(review_scope(self._round)):
            verdicts = await self.review(ctx, pairs)
        if isinstance(verdicts, Mapping):  # anything else leaves the round unresolved
            for item, _ in pairs:
                try:
                    verdict = AnswerCheck.model_validate(verdicts[item.id])
                except (KeyError, ValidationError):
                    continue  # unresolved: the policy decides what that means
                aid = item_answer_id(item.id, self._round)
                ctx.ledger.create(answer_review_id(aid), verdict)
                ctx.ledger.link(answer_review_id(aid), "reviews", aid)
        return verdicts

    async def _observe(
        self, ctx: RecipeContext, stage_id: str, results: list[AnswerResult]
    ) -> None:
        counts = Counter(r.status for r in results)
        accepted, fallback = counts["accepted"], counts["fallback"]
        if stage_id == FINAL_STAGE:
            status = f"final accepted={accepted} fallback={fallback} blocked={counts['blocked']}"
            blocked = [r.item_id for r in results if r.status == "blocked"]
            stopped = any(issue.code == BUDGET for r in results for issue in r.issues)
            phase = OVER_BUDGET if stopped else ""
            note = f"; blocked: {_some(blocked)}" if blocked else ""
            if phase:
                note += f"; {ctx.spending.spent_text()}"
            ctx.set_status(status, status + note, phase=phase)
        else:
            failing = [r.item_id for r in results if r.status == "blocked"]
            status = f"round:{stage_id.rsplit(':', 1)[-1]} accepted={accepted}"
            status += f" fallback={fallback}" if fallback else ""
            status += f" failing={len(failing)}"
            note = f"; failing: {_some(failing)}" if failing else ""
            ctx.set_status(status, f"{stage_id}: {status}{note}")
        await self.observe(ctx, stage_id, results)

    def _store_outcome(self, ledger: Ledger, item: AnswerItem, result: AnswerResult) -> None:
        oid = outcome_id(item.id)
        ledger.create(oid, result)
        for input_id in item.input_ids:
            ledger.link(oid, "answers", question_id(input_id))
        latest = self._latest.get(item.id)
        if latest is not None:
            ledger.link(oid, "based_on" if result.status == "accepted" else "last_attempt", latest)


SHOWN_IDS = 20  # item ids an announcement lists; a batch of thousands names the first


def _some(ids: list[str]) -> str:
    shown = ", ".join(ids[:SHOWN_IDS])
    return shown if len(ids) <= SHOWN_IDS else f"{shown} and {len(ids) - SHOWN_IDS} more"


# --- The ready, LLM-driven AnswerFlow ----------------------------------------------

# The review's issue code (the grounding rule's are in durafact._core.grounding; the flow
# adds BUDGET, MISSING_VALUE, REVIEW_UNRESOLVED, SOURCE_UNAVAILABLE, ...).
REVIEW_FAILED = "REVIEW_FAILED"
NOTE_CHARS = 160  # how much of an issue's message or an error one line quotes

NOT_ENOUGH_INFORMATION = "Not enough information to answer this question."

QUESTION_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")


class Question(BaseModel):
    """One question and the text to answer it from; no (or a blank) source: `none`."""

    id: str = Field(description="Names the question in artifact ids: letters, digits, _ . -")
    question: str
    source: str | None = Field(default=None, description="The text the answer must quote.")


class AnswerBatchInput(AnswerFlowSettings):
    """A batch of questions and how hard to try. Types only: `check_answer_batch` holds
    every rule, so the starter and the workflow reject a bad batch the same way."""

    questions: list[Question]


class ItemAnswer(BaseModel):
    """The model's answer to one question, stored as `answer:{id}:{round}`."""

    item_id: str = Field(description="The id of the question this answers.")
    answer: str = Field(description="A short answer, taken from the question's source only.")
    quote: str = Field(
        description="A passage of at least a few words copied verbatim from that question's "
        "source that supports the answer."
    )


class BatchAnswers(BaseModel):
    """The structured output of a generate or repair call: one answer per question."""

    answers: list[ItemAnswer]


class Verdict(BaseModel):
    """The judge's verdict on one answer."""

    item_id: str = Field(description="The id of the question whose answer is judged.")
    status: Literal["passed", "failed"]
    reason: str = Field(description="One sentence: why the answer passes or fails.")


class Verdicts(BaseModel):
    """The structured output of a review call: one verdict per answer."""

    verdicts: list[Verdict]


class ItemVerdict(BaseModel):
    """How one question ended: what a person reads, and references to the rest."""

    item_id: str
    status: Literal["accepted", "fallback", "blocked"]
    answer: str | None = Field(
        default=None, description="The accepted answer's text, or the fallback's; None: blocked."
    )
    issues: list[AnswerIssue] = Field(description="What decided the ending (see AnswerResult).")
    rounds: int = Field(description="The generate rounds that included the item.")
    outcome: ArtifactRef = Field(description="`outcome:{id}`: its AnswerResult, every check.")
    accepted: ArtifactRef | None = Field(
        default=None, description="The accepted `answer:{id}:{round}`: its ItemAnswer and quote."
    )


class AnswerFlowResult(BaseModel):
    """Usage and one verdict per question, in the batch's order. The answers' quotes,
    the checks and the reviews are referenced, not carried: each is stored in history
    once, as the result of the call that made it. Read them from the run's ledger (the
    `artifacts` query, or `python starter.py artifacts ID`):
    `ledger.resolve(verdict.accepted, ItemAnswer).quote`."""

    usage: Usage
    results: list[ItemVerdict]

    @property
    def counts(self) -> dict[str, int]:
        """How many items ended `accepted`, `fallback` and `blocked` (all three keys)."""
        counts = Counter(r.status for r in self.results)
        return {status: counts[status] for status in ("accepted", "fallback", "blocked")}


# --- Validation: the starter calls these before it starts anything ---------------


def check_answer_batch(batch: AnswerBatchInput) -> list[AnswerItem]:
    """The batch's `AnswerItem`s, or an `AnswerBatchError` naming the first problem.

    Rules: `max_repairs` is an int in [0, MAX_REPAIRS]; `review_policy` is one of
    `REVIEW_POLICIES`; every question has an
    id of letters, digits, `_`, `.` and `-` (at most 64, starting with a letter or
    digit) and a non-blank question; there is at least one question; then
    `validate_answer_batch` (a positive `max_items`, at most that many questions,
    distinct ids). One item per question, with the question as its `data`; one whose
    source is None or blank has the source status `none` (issue `NO_SOURCE`).
    """
    if not _is_int(batch.max_repairs) or not 0 <= batch.max_repairs <= MAX_REPAIRS:
        raise AnswerBatchError(
            f"max_repairs must be an integer from 0 to {MAX_REPAIRS}, got {batch.max_repairs!r}"
        )
    if batch.review_policy not in REVIEW_POLICIES:
        raise AnswerBatchError(
            f"review_policy must be one of {', '.join(REVIEW_POLICIES)}, "
            f"got {batch.review_policy!r}"
        )
    if not batch.questions:
        raise AnswerBatchError("the batch has no questions")
    for index, question in enumerate(batch.questions):
        if not QUESTION_ID.fullmatch(question.id):
            raise AnswerBatchError(
                f"question {index + 1} has the id {question.id!r}: an id is 1-64 letters, "
                "digits, '_', '.' or '-', starting with a letter or digit"
            )
        if not question.question.strip():
            raise AnswerBatchError(f"question {question.id!r} is empty")
    items = [
        AnswerItem(
            id=question.id,
            input_ids=[question.id],
            source_status="ready" if (question.source or "").strip() else "none",
            data=question,
        )
        for question in batch.questions
    ]
    validate_answer_batch([q.id for q in batch.questions], items, batch.max_items)
    return items


# `budget_tokens`: the older form of `budget` (see AnswerFlowSettings).
_BATCH_FIELDS = {*AnswerBatchInput.model_fields, "budget_tokens"}
_QUESTION_FIELDS = set(Question.model_fields)


def load_answer_batch(
    document: str | bytes | Mapping[str, Any] | list[Any],
    *,
    max_repairs: int | None = None,
    review_policy: str | None = None,
    budget_tokens: int | None = None,
    max_items: int | None = None,
) -> AnswerBatchInput:
    """Parse a batch file's JSON (or its parsed value), apply the command-line overrides
    that are not None, and check it: an `AnswerBatchInput`, or an `AnswerBatchError`.

    The document is either a list of questions or an object with `questions` and, as
    defaults the overrides replace, `max_repairs`, `review_policy`, `budget_tokens`
    and `max_items`. A question is `{"id": ..., "question": ..., "source": ...}`;
    `source` may be left out or null for a question that has none. Unknown fields are
    errors, so a misspelt key is not silently ignored.
    """
    if isinstance(document, str | bytes):
        try:
            document = json.loads(document)
        except json.JSONDecodeError as exc:
            raise AnswerBatchError(f"the batch is not valid JSON: {exc}") from None
        except UnicodeDecodeError as exc:
            raise AnswerBatchError(f"the batch is not UTF-8 text: {exc}") from None
        except RecursionError:
            raise AnswerBatchError("the batch is nested too deeply to be a batch") from None
        except ValueError:  # the only other one json raises: an integer past 4300 digits
            raise AnswerBatchError(
                "the batch holds a number too long to read (over 4300 digits)"
            ) from None
    if isinstance(document, list):
        document = {"questions": document}
    if not isinstance(document, Mapping):
        raise AnswerBatchError(
            "the batch must be a JSON list of questions or an object with 'questions', "
            f"got {type(document).__name__}"
        )
    data = dict(document)
    unknown = sorted(set(data) - _BATCH_FIELDS)
    if unknown:
        raise AnswerBatchError(
            f"unknown field {', '.join(map(repr, unknown))} in the batch "
            f"(fields: {', '.join(AnswerBatchInput.model_fields)})"
        )
    if "questions" not in data:
        raise AnswerBatchError("the batch has no 'questions' list")
    if isinstance(data["questions"], list):
        for index, question in enumerate(data["questions"]):
            extra = sorted(set(question) - _QUESTION_FIELDS) if isinstance(question, dict) else []
            if extra:
                raise AnswerBatchError(
                    f"question {index + 1} has unknown field {', '.join(map(repr, extra))} "
                    f"(fields: {', '.join(Question.model_fields)})"
                )
    overrides = {
        "max_repairs": max_repairs,
        "review_policy": review_policy,
        "budget_tokens": budget_tokens,
        "max_items": max_items,
    }
    data.update({key: value for key, value in overrides.items() if value is not None})
    try:
        # Strict: `true` is not a number of repairs and 7 is not a question id.
        batch = AnswerBatchInput.model_validate(data, strict=True)
    except ValidationError as exc:
        error = exc.errors()[0]
        where = _location(error["loc"])
        message = error["msg"].removeprefix("Value error, ")
        raise AnswerBatchError(f"{where}: {message}" if where else message) from None
    check_answer_batch(batch)
    return batch


def _location(loc: tuple[Any, ...]) -> str:
    # ("questions", 1, "question") -> "question 2: question"
    parts = list(loc)
    if len(parts) >= 2 and parts[0] == "questions" and isinstance(parts[1], int):
        rest = ".".join(map(str, parts[2:]))
        return f"question {parts[1] + 1}" + (f": {rest}" if rest else "")
    return ".".join(map(str, parts))


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


GENERATOR = (
    "You answer questions from their sources. Each question is given as context with its "
    "id, the question and its source text. Answer every question you are asked about, "
    "briefly, from its own source only. For each answer copy into `quote` one passage of at "
    "least a few words, verbatim and unchanged, from that question's source that supports "
    "the answer. Give exactly one entry per question id."
)
REVIEWER = (
    "You are a strict reviewer of answers. Each question is given as context with its source, "
    "followed by the proposed answer and the quote it rests on. An answer passes only when it "
    "answers the question, is correct according to the source, and the quote supports it. "
    "Give exactly one verdict per question id, with a one-sentence reason."
)


class ReviewCallFailed(Exception):
    """The review's model call failed for good (after Temporal's retries)."""


def show_answers(result: AnswerFlowResult, ledger: Ledger | None) -> str:
    """Each question's verdict, its answer, quote and issues, then the counts."""
    lines = []
    for item in result.results:
        lines.append(f"{item.item_id}: {item.status} after {item.rounds} round(s)")
        if item.answer is not None:
            lines.append(indent(item.answer, "  answer: "))
        if item.accepted is not None and ledger is not None:
            lines.append(indent(ledger.resolve(item.accepted, ItemAnswer).quote, "  quote:  "))
        lines.extend(indent(issue.message, f"  {issue.code}: ") for issue in item.issues)
    lines.append(", ".join(f"{n} {status}" for status, n in result.counts.items()))
    return "\n".join(lines)


@workflow.defn
class AnswerFlowWorkflow(AnswerFlow[AnswerBatchInput, AnswerFlowResult]):
    """Questions with sources in; one grounded answer, a fallback or a block per question.

    The batch is checked by `check_answer_batch`, the function the starter calls
    before it starts anything. `generate` is one structured model call per round for
    the batch; `check` is the grounding rule (`durafact._core.grounding`): the answer's
    `quote` must be a non-trivial passage of the question's source, copied verbatim,
    which code can verify the same way on every replay. What that cannot see, whether
    the quote supports the answer, is what `review` (one model-judge call per round)
    is for: a failed verdict sends the answer to repair with `REVIEW_FAILED`; a failed
    review call leaves the answers unresolved, for the review policy to decide.
    A `budget` makes `can_invoke` refuse every call once the run has spent it
    (checked before each call, so a run can end up to one call over). A question
    without a source falls back to `NOT_ENOUGH_INFORMATION`; an answer still failing,
    or stopped by the budget, is blocked, so a person sees exactly which answers need
    attention, and why, instead of a guess.

    History discipline (DESIGN.md section 6): questions, earlier answers and reviews
    reach the model as ledger ids, which the model activity reads by query. A repair
    call's input names the failing items' questions, previous answers and failed
    reviews, plus one short line of issue codes per item: it grows with the number of
    failing items, never with the round, and repeats no text already in history.
    """

    not_enough_information: ClassVar[str] = NOT_ENOUGH_INFORMATION
    command = ANSWER
    show_result = staticmethod(show_answers)

    @workflow.init
    def __init__(self, batch: AnswerBatchInput) -> None:
        super().__init__()
        self.batch = batch

    @workflow.run
    async def run(self, batch: AnswerBatchInput) -> AnswerFlowResult:
        return await self.execute(batch)

    def questions(self, batch: AnswerBatchInput) -> dict[str, Question]:
        return {question.id: question for question in batch.questions}

    def items(self, batch: AnswerBatchInput, questions: Mapping[str, Any]) -> list[AnswerItem]:
        return check_answer_batch(batch)

    async def generate(
        self,
        ctx: RecipeContext,
        items: list[AnswerItem],
        repairs: dict[str, list[AnswerIssue]] | None,
        previous: dict[str, Any] | None,
    ) -> dict[str, ItemAnswer]:
        """One model call: round 0 answers every ready question, a repair round only the
        failing ones, shown their previous answers, failed reviews and issues."""
        ids = [item.id for item in items]
        refs: list[ContextRef] = []
        if repairs is None:
            refs = [question_id(i) for i in ids]
            prompt = f"Answer each of the {counted(len(ids), 'question')} given as context."
            summary = f"request model: answer {counted(len(ids), 'question')}"
        else:
            lines = []
            for i in ids:
                refs.append(question_id(i))
                review = None
                if previous and i in previous:
                    [answer] = ctx.refs(previous[i])  # answer:{i}:{round - 1}
                    refs.append(answer)
                    review = answer_review_id(str(answer))
                notes = []
                for issue in repairs.get(i, []):
                    if issue.code == REVIEW_FAILED and review is not None and review in ctx.ledger:
                        refs.append(review)
                        notes.append(f"{issue.code} (see [{review}])")
                    else:
                        notes.append(
                            f"{issue.code}: {shorten(issue.message, NOTE_CHARS, one_line=True)}"
                        )
                lines.append(f"- {i}: " + "; ".join(notes or ["rejected"]))
            prompt = (
                f"Your answers to {counted(len(ids), 'question')} were rejected or missing. "
                "Answer only these questions again and fix every issue:\n" + "\n".join(lines)
            )
            summary = f"request model: repair {counted(len(ids), 'answer')}"
        output = await ctx.llm.structured(
            BatchAnswers, prompt, system=GENERATOR, context=refs, summary=summary
        )
        asked = set(ids)
        values: dict[str, ItemAnswer] = {}
        ignored = []
        for answer in output.answers:
            if answer.item_id in asked and answer.item_id not in values:
                values[answer.item_id] = answer
            else:
                ignored.append(answer.item_id)
        if ignored:
            ctx.announce(f"ignored answers for {', '.join(ignored)}", kind="warning")
        return values

    def check(self, item: AnswerItem, value: ItemAnswer) -> AnswerCheck:
        """The grounding rule: deterministic, no model."""
        issues = grounding_issues(value.answer, value.quote, item.data.source or "")
        return AnswerCheck(status="failed" if issues else "passed", issues=issues)

    async def review(
        self, ctx: RecipeContext, pairs: list[tuple[AnswerItem, ItemAnswer]]
    ) -> dict[str, AnswerCheck]:
        """One model-judge call for the round's answers that passed `check`."""
        ids = [item.id for item, _ in pairs]
        refs: list[ContextRef] = []
        for item, answer in pairs:
            refs += [question_id(item.id), *ctx.refs(answer)]
        try:
            output = await ctx.llm.structured(
                Verdicts,
                f"Judge the {counted(len(ids), 'answer')} given as context.",
                system=REVIEWER,
                context=refs,
                summary=f"request model: review {counted(len(ids), 'answer')}",
            )
        except ActivityError as exc:
            reraise_cancellation(exc)
            cause = exc.cause
            reason = (
                f"{cause.type}: {cause.message}" if isinstance(cause, ApplicationError) else exc
            )
            shown = shorten(str(reason), NOTE_CHARS, one_line=True)
            ctx.announce(f"the review call failed: {shown}", kind="warning")
            # The flow turns this into REVIEW_UNRESOLVED; the policy decides what it means.
            raise ReviewCallFailed(str(reason)) from exc
        judged = set(ids)
        checks: dict[str, AnswerCheck] = {}
        for verdict in output.verdicts:
            if verdict.item_id not in judged or verdict.item_id in checks:
                continue
            issues = []
            if verdict.status == "failed":
                reason = verdict.reason.strip() or "the review failed the answer"
                issues = [AnswerIssue(code=REVIEW_FAILED, message=reason)]
            checks[verdict.item_id] = AnswerCheck(status=verdict.status, issues=issues)
        missing = [i for i in ids if i not in checks]
        if missing:
            ctx.announce(f"the review left out {', '.join(missing)}", kind="warning")
        return checks

    def fallback(self, item: AnswerItem, issues: list[AnswerIssue]) -> RecoveryResult:
        """No source: say so. Anything else: not handled, so the item is blocked for a person."""
        if item.source_status != "ready":
            return RecoveryResult(handled=True, value=self.not_enough_information)
        return RecoveryResult(handled=False)

    async def finish(
        self, ctx: RecipeContext, batch: AnswerBatchInput, results: list[AnswerResult]
    ) -> AnswerFlowResult:
        return AnswerFlowResult(usage=ctx.usage, results=[self._verdict(ctx, r) for r in results])

    def _verdict(self, ctx: RecipeContext, result: AnswerResult) -> ItemVerdict:
        accepted = result.status == "accepted" and result.item_id in self._latest
        answer = None
        if accepted:
            answer = ItemAnswer.model_validate(result.value).answer
        elif result.value is not None:
            answer = str(result.value)
        return ItemVerdict(
            item_id=result.item_id,
            status=result.status,
            answer=answer,
            issues=result.issues,
            rounds=result.rounds,
            outcome=ctx.ledger.ref(outcome_id(result.item_id)),
            # The answer the outcome is linked `based_on` (see `_store_outcome`).
            accepted=ctx.ledger.ref(self._latest[result.item_id]) if accepted else None,
        )
