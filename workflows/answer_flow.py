"""AnswerFlow on Temporal: answer a batch of questions from their sources, repair only
the answers that fail, and end every question accepted, fallback or blocked.

`AnswerFlowWorkflow` is the ready, LLM-driven form of `durafact.answer_flow`: the
workflow defines an answer flow whose hooks are its own methods and runs it once
over the batch. Top to bottom, a run:

1. **Validates** the batch at entry (`check_answer_batch`, the same function the
   starter calls before it starts anything): a bad batch fails the workflow at once
   with the non-retryable `ApplicationError` type `InvalidAnswerBatch`, before any
   model call. `AnswerBatchInput` holds the types only; every rule (ids, limits,
   the batch's shape through `validate_answer_batch`) lives in that function, so a
   payload that decodes but breaks a rule fails the run instead of retrying a
   workflow task forever.
2. **Stores** each question, with its source, as `question:{id}`. One question is
   one `AnswerItem` (id = question id, `input_ids=[id]`); a question whose source
   is missing or blank is `unavailable` and is never sent to the model.
3. **Rounds** (at most `max_repairs + 1`). `generate` is ONE structured model call
   per round for the whole batch: `llm:generate:0`, then `llm:repair:1`,
   `llm:repair:2`, ... for only the items that failed. Each answer is stored as
   `answer:{id}:{round}` (linked `answers` -> the question, and `revises` -> the
   item's previous answer). `check` judges it in workflow code (the grounding rule
   below); the items that pass go to `review`, ONE structured model-judge call per
   round (`llm:review:0`, `llm:review:1`, ...), whose verdicts are stored as
   `review:answer:{id}:{round}` (linked `reviews` -> the answer).
4. **Ends** every item: `outcome:{id}` (an `AnswerResult` whose `value` is the
   answer text) linked `answers` -> the question, `based_on` -> the accepted
   answer, or `last_attempt` -> the last rejected answer of an item that did not
   end accepted. `AnswerFlowResult` reads its results from those outcomes.

History discipline (DESIGN.md section 6). Questions, sources and earlier answers
reach the model as ledger ids in `context=[...]`; the model activity fetches their
text by query, so no activity input carries them. A repair round's input names
the failing items' questions, their previous answers and, where the review failed
them, that review, plus their issue codes as one short line each: it grows with
the number of failing items, never with the round number, and never repeats a
text that is already in history (a review's reason is referenced, not inlined).

The grounding rule (`check`). An answer passes when it is non-empty and its
`quote` is a non-trivial passage copied verbatim from the item's source: after
normalising Unicode (NFKC, typographic quotes and dashes), case and whitespace,
and trimming quote marks and punctuation at its two ends, the quote has at least
`MIN_QUOTE_WORDS` (3) words or `MIN_QUOTE_CHARS` (12) characters and occurs in the
source as one substring. Issue codes: `EMPTY_ANSWER`, `QUOTE_TOO_SHORT`,
`NOT_IN_SOURCE`. Why this rule: a verbatim quote can be checked without a model,
deterministically and on replay, and it is how a reader traces the answer to the
passage it rests on; the minimum length keeps a single common word ("the",
"Paris") from counting as evidence. What the rule cannot see, whether the quote
actually supports the answer, is what the model-judge `review` is for.

Review policies: `off` makes no review call; `optional` (default) reviews the
answers that passed `check`, and a review that fails (after Temporal's retries)
or leaves an answer out keeps the local verdict (`REVIEW_UNRESOLVED` as a note);
`required` blocks an answer the review did not resolve. A failed verdict sends
the item to repair with the issue `REVIEW_FAILED`.

Budget: with `budget_tokens` set, `can_invoke` refuses every model call once the
run's total tokens reach it; waiting items then get the issue `BUDGET`. The check
comes before each call, so a run can end up to one call's tokens over its budget.

Fallback: an unavailable source is `handled` with the text `NOT_ENOUGH_INFORMATION`
(status `fallback`); an item still failing after the last round, or stopped by the
budget, is not handled (status `blocked`), so a person sees exactly which answers
need attention, with the issues that blocked them, instead of a guess.

Status (`DurafactStatus`): `answering`, then after each round
`round:{r} accepted={a} failing={f}` (with `fallback={n}` after `accepted` when
some items already ended as fallback), then `final accepted={a} fallback={f}
blocked={b}`; `failed` when the run fails (an invalid batch included).
"""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Mapping
from typing import Any, ClassVar, Literal

from pydantic import BaseModel, Field, ValidationError
from temporalio import workflow
from temporalio.exceptions import ActivityError, ApplicationError

from durafact.answer_flow import (
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
from durafact.grounding import grounding_issues
from durafact.ids import answer_review_id, item_answer_id, outcome_id, question_id
from durafact.ledger import Ledger
from durafact.llm import ContextRef, Usage
from workflows.recipe import RECIPE_ATTRIBUTE, Recipe, RecipeContext

# The review's issue code (the grounding rule's are in durafact.grounding; the flow
# adds BUDGET, MISSING_VALUE, REVIEW_UNRESOLVED, SOURCE_UNAVAILABLE, ...).
REVIEW_FAILED = "REVIEW_FAILED"

NOT_ENOUGH_INFORMATION = "Not enough information to answer this question."

MAX_REPAIRS = 10  # a sanity bound on rounds; the token budget bounds cost
QUESTION_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")


# --- Input, output, and the model's structured outputs ------------------------------


class Question(BaseModel):
    """One question and the text to answer it from; no (or a blank) source = unavailable."""

    id: str = Field(description="Names the question in artifact ids: letters, digits, _ . -")
    question: str
    source: str | None = Field(default=None, description="The text the answer must quote.")


class AnswerBatchInput(BaseModel):
    """A batch of questions and how hard to try. Types only: `check_answer_batch` holds
    every rule, so the starter and the workflow reject a bad batch the same way."""

    questions: list[Question]
    max_repairs: int = Field(default=1, description=f"Repair rounds, 0 to {MAX_REPAIRS}.")
    review_policy: ReviewPolicy = "optional"
    budget_tokens: int | None = Field(
        default=None, description="Stop making model calls once the run used this many tokens."
    )
    max_items: int = Field(default=20, description="The most questions one batch may hold.")


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
    """The judge's verdict on one answer, stored as `review:answer:{id}:{round}`."""

    item_id: str = Field(description="The id of the question whose answer is judged.")
    status: Literal["passed", "failed"]
    reason: str = Field(description="One sentence: why the answer passes or fails.")


class Verdicts(BaseModel):
    """The structured output of a review call: one verdict per answer."""

    verdicts: list[Verdict]


class AnswerFlowResult(BaseModel):
    """Usage and the ledger; the results are read from its `outcome:{id}` artifacts, so
    the result (stored in history) holds each text once."""

    usage: Usage
    ledger: Ledger

    @property
    def results(self) -> list[AnswerResult]:
        """One result per question, in the batch's order."""
        return [a.data for a in self.ledger.find_all(AnswerResult)]

    @property
    def counts(self) -> dict[str, int]:
        """How many items ended `accepted`, `fallback` and `blocked` (all three keys)."""
        counts = Counter(r.status for r in self.results)
        return {status: counts[status] for status in ("accepted", "fallback", "blocked")}

    @property
    def answers(self) -> dict[str, ItemAnswer]:
        """The accepted answers with their quotes, by question id."""
        accepted: dict[str, ItemAnswer] = {}
        for result in self.results:
            for link in self.ledger.links_from(outcome_id(result.item_id), "based_on"):
                accepted[result.item_id] = self.ledger.get(link.target).typed(ItemAnswer).data
        return accepted


# --- Validation: the starter calls these before it starts anything ---------------


def check_answer_batch(batch: AnswerBatchInput) -> list[AnswerItem]:
    """The batch's `AnswerItem`s, or an `AnswerBatchError` naming the first problem.

    Rules: `max_repairs` is an int in [0, MAX_REPAIRS]; `budget_tokens` is None or a
    positive int; `review_policy` is one of `REVIEW_POLICIES`; every question has an
    id of letters, digits, `_`, `.` and `-` (at most 64, starting with a letter or
    digit) and a non-blank question; there is at least one question; then
    `validate_answer_batch` (a positive `max_items`, at most that many questions,
    distinct ids). A question whose source is None
    or blank becomes an `unavailable` item.
    """
    if not _is_int(batch.max_repairs) or not 0 <= batch.max_repairs <= MAX_REPAIRS:
        raise AnswerBatchError(
            f"max_repairs must be an integer from 0 to {MAX_REPAIRS}, got {batch.max_repairs!r}"
        )
    if batch.budget_tokens is not None and (
        not _is_int(batch.budget_tokens) or batch.budget_tokens < 1
    ):
        raise AnswerBatchError(
            f"budget_tokens must be a positive integer or absent, got {batch.budget_tokens!r}"
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
            source_status="ready" if (question.source or "").strip() else "unavailable",
        )
        for question in batch.questions
    ]
    validate_answer_batch([q.id for q in batch.questions], items, batch.max_items)
    return items


_BATCH_FIELDS = set(AnswerBatchInput.model_fields)
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
    `source` may be left out or null for an unavailable one. Unknown fields are
    errors, so a misspelt key is not silently ignored.
    """
    if isinstance(document, str | bytes):
        try:
            document = json.loads(document)
        except json.JSONDecodeError as exc:
            raise AnswerBatchError(f"the batch is not valid JSON: {exc}") from None
        except UnicodeDecodeError as exc:
            raise AnswerBatchError(f"the batch is not UTF-8 text: {exc}") from None
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
        raise AnswerBatchError(f"{where}: {error['msg']}" if where else error["msg"]) from None
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


# --- The workflow ----------------------------------------------------------------------

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


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


def _short(text: str, limit: int = 160) -> str:
    line = " ".join(text.split())
    return line if len(line) <= limit else line[: limit - 1] + "…"


@workflow.defn
class AnswerFlowWorkflow(Recipe):
    """Questions with sources in; one grounded answer, a fallback or a block per question."""

    recipe_name = "answer_flow"
    not_enough_information: ClassVar[str] = NOT_ENOUGH_INFORMATION

    def __init__(self) -> None:
        super().__init__()
        self.round = -1  # the round of the last generate call
        self._batch: AnswerBatchInput | None = None
        self._questions: dict[str, Question] = {}
        self._latest: dict[str, str] = {}  # item id -> its latest answer artifact id

    @workflow.run
    async def run(self, batch: AnswerBatchInput) -> AnswerFlowResult:
        ctx, ledger = self._ctx, self._ctx.ledger
        workflow.upsert_search_attributes([RECIPE_ATTRIBUTE.value_set(self.recipe_name)])
        try:
            items = self._entry(batch)
            for question in batch.questions:
                ledger.create(question_id(question.id), question)
            self._questions = {q.id: q for q in batch.questions}
            unavailable = sum(item.source_status == "unavailable" for item in items)
            ctx.set_status(
                "answering",
                f"answering {_count(len(items), 'question')}"
                + (f" ({unavailable} without a source)" if unavailable else ""),
            )
            flow = define_answer_flow(
                max_items=batch.max_items,
                max_repairs=batch.max_repairs,
                review_policy=batch.review_policy,
                can_invoke=self.can_invoke,
                generate=self.generate,
                check=self.check,
                review=None if batch.review_policy == "off" else self.review,
                fallback=self.fallback,
                observe=self.observe,
            )
            results = await flow.run([item.id for item in items], items, ctx)
            for result in results:
                self._store_outcome(result)
        except Exception:
            ctx.set_status("failed")
            raise
        return AnswerFlowResult(usage=ctx.usage, ledger=ledger)

    def _entry(self, batch: AnswerBatchInput) -> list[AnswerItem]:
        """The checked items, or the run fails at once with `InvalidAnswerBatch`."""
        self._batch = batch
        try:
            return check_answer_batch(batch)
        except (AnswerBatchError, AnswerFlowDefinitionError) as exc:
            self._ctx.announce(f"invalid batch: {exc}", kind="error")
            raise ApplicationError(
                str(exc), type="InvalidAnswerBatch", non_retryable=True
            ) from None

    def _store_outcome(self, result: AnswerResult) -> None:
        ledger, item_id = self._ctx.ledger, result.item_id
        value = result.value
        if isinstance(value, ItemAnswer):
            value = value.answer
        oid = outcome_id(item_id)
        ledger.create(oid, result.model_copy(update={"value": value}))
        ledger.link(oid, "answers", question_id(item_id))
        latest = self._latest.get(item_id)
        if latest is not None:
            ledger.link(oid, "based_on" if result.status == "accepted" else "last_attempt", latest)

    # --- hooks: the answer flow calls these ---------------------------------------

    def can_invoke(self, ctx: RecipeContext) -> bool:
        """False once the run's tokens reach `budget_tokens`; always True without one."""
        budget = self._batch.budget_tokens if self._batch else None
        return budget is None or ctx.usage.total_tokens < budget

    async def generate(
        self,
        items: list[AnswerItem],
        ctx: RecipeContext,
        *,
        repairs: dict[str, list[AnswerIssue]] | None,
        previous: dict[str, Any] | None,
    ) -> dict[str, ItemAnswer]:
        """One model call for the whole round: round 0 answers every ready question, a
        repair round only the failing ones, shown their previous answers and issues."""
        self.round += 1
        r, ids = self.round, [item.id for item in items]
        refs: list[ContextRef] = []
        if repairs is None:
            stage = f"generate:{r}"
            refs = [question_id(i) for i in ids]
            prompt = f"Answer each of the {_count(len(ids), 'question')} given as context."
            summary = f"request model: answer {_count(len(ids), 'question')} (round {r})"
        else:
            stage = f"repair:{r}"
            lines = []
            for i in ids:
                refs.append(question_id(i))
                if previous and i in previous:
                    refs.append(item_answer_id(i, r - 1))
                notes = []
                for issue in repairs.get(i, []):
                    if (
                        issue.code == REVIEW_FAILED
                        and answer_review_id(item_answer_id(i, r - 1)) in ctx.ledger
                    ):
                        refs.append(answer_review_id(item_answer_id(i, r - 1)))
                        notes.append(
                            f"{issue.code} (see [{answer_review_id(item_answer_id(i, r - 1))}])"
                        )
                    else:
                        notes.append(f"{issue.code}: {_short(issue.message)}")
                lines.append(f"- {i}: " + "; ".join(notes or ["rejected"]))
            prompt = (
                f"Your answers to {_count(len(ids), 'question')} were rejected or missing. "
                "Answer only these questions again and fix every issue:\n" + "\n".join(lines)
            )
            summary = f"request model: repair {_count(len(ids), 'answer')} (round {r})"
        ctx.announce(f"round {r}: {summary.removeprefix('request model: ')}")
        with ctx.scoped(stage):
            output = await ctx.llm.structured(
                BatchAnswers, prompt, system=GENERATOR, context=refs, summary=summary
            )

        wanted, values, ignored = set(ids), {}, []
        for answer in output.answers:
            if answer.item_id in wanted and answer.item_id not in values:
                values[answer.item_id] = answer
            else:
                ignored.append(answer.item_id)
        if ignored:
            ctx.announce(f"round {r}: ignored answers for {', '.join(ignored)}", kind="warning")
        for i in ids:
            if i not in values:
                continue
            aid = item_answer_id(i, r)
            ctx.ledger.create(aid, values[i])
            ctx.ledger.link(aid, "answers", question_id(i))
            if i in self._latest:
                ctx.ledger.link(aid, "revises", self._latest[i])
            self._latest[i] = aid
        return values

    def check(self, item: AnswerItem, value: ItemAnswer) -> AnswerCheck:
        """The grounding rule (module docstring): deterministic, no model."""
        source = self._questions[item.id].source or ""
        issues = grounding_issues(value.answer, value.quote, source)
        return AnswerCheck(status="failed" if issues else "passed", issues=issues)

    async def review(
        self, pairs: list[tuple[AnswerItem, ItemAnswer]], ctx: RecipeContext
    ) -> dict[str, AnswerCheck]:
        """One model-judge call for the round's answers that passed `check`."""
        r, ids = self.round, [item.id for item, _ in pairs]
        refs: list[ContextRef] = []
        for i in ids:
            refs += [question_id(i), item_answer_id(i, r)]
        summary = f"request model: review {_count(len(ids), 'answer')} (round {r})"
        ctx.announce(f"round {r}: {summary.removeprefix('request model: ')}")
        try:
            with ctx.scoped(f"review:{r}"):
                output = await ctx.llm.structured(
                    Verdicts,
                    f"Judge the {_count(len(ids), 'answer')} given as context.",
                    system=REVIEWER,
                    context=refs,
                    summary=summary,
                )
        except ActivityError as exc:
            cause = exc.cause
            reason = (
                f"{cause.type}: {cause.message}" if isinstance(cause, ApplicationError) else exc
            )
            ctx.announce(f"round {r}: the review call failed: {_short(str(reason))}", "warning")
            # The flow turns this into REVIEW_UNRESOLVED; the policy decides what it means.
            raise ReviewCallFailed(str(reason)) from exc
        checks: dict[str, AnswerCheck] = {}
        for verdict in output.verdicts:
            if verdict.item_id not in ids or verdict.item_id in checks:
                continue
            aid = item_answer_id(verdict.item_id, r)
            ctx.ledger.create(answer_review_id(aid), verdict)
            ctx.ledger.link(answer_review_id(aid), "reviews", aid)
            issues = []
            if verdict.status == "failed":
                reason = verdict.reason.strip() or "the review failed the answer"
                issues = [AnswerIssue(code=REVIEW_FAILED, message=reason)]
            checks[verdict.item_id] = AnswerCheck(status=verdict.status, issues=issues)
        missing = [i for i in ids if i not in checks]
        if missing:
            ctx.announce(f"round {r}: the review left out {', '.join(missing)}", kind="warning")
        return checks

    def fallback(self, item: AnswerItem, issues: list[AnswerIssue]) -> RecoveryResult:
        """No source: say so. Anything else: not handled, so the item is blocked for a person."""
        if item.source_status == "unavailable":
            return RecoveryResult(handled=True, value=self.not_enough_information)
        return RecoveryResult(handled=False)

    def observe(self, stage_id: str, results: list[AnswerResult]) -> None:
        """Keep `DurafactStatus` on the counts so far; announce the items still failing."""
        counts = Counter(r.status for r in results)
        accepted, fallback = counts["accepted"], counts["fallback"]
        if stage_id == "final":
            status = f"final accepted={accepted} fallback={fallback} blocked={counts['blocked']}"
            blocked = [r.item_id for r in results if r.status == "blocked"]
            note = f"; blocked: {', '.join(blocked)}" if blocked else ""
            self._ctx.set_status(status, status + note)
            return
        round_ = stage_id.rsplit(":", 1)[-1]
        failing = [r.item_id for r in results if r.status == "blocked"]
        status = f"round:{round_} accepted={accepted}"
        status += f" fallback={fallback}" if fallback else ""
        status += f" failing={len(failing)}"
        note = f"; failing: {', '.join(failing)}" if failing else ""
        self._ctx.set_status(status, f"{stage_id}: {status}{note}")
