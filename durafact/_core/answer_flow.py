"""The AnswerFlow engine: answer a batch of items, repair only what fails, end every
item explicitly.

The Python form of seed 004's `defineAnswerFlow` (DESIGN.md section 3); the recipe
base `durafact._recipes.answer_flow.AnswerFlow` runs it with its hooks as methods.

A request's input ids are covered by items; `generate` proposes one value per item,
a local `check` (and, by policy, a batch `review`) judges it, failing items get
repair rounds, and every item ends as exactly one of `accepted`, `fallback` or
`blocked`.

This module runs inside the Temporal workflow sandbox, so it is pure: no I/O, no
clock, no randomness, no threads. The hooks are where the world is reached: in a
workflow `generate` and `review` are one LLM activity per round for the whole batch,
while `can_invoke`, `check` and `fallback` run in workflow code and must be
synchronous and deterministic. A hook that gets the run's `ctx` gets it first, as
the recipe's hooks do, so the recipe passes its own methods in that order.
"""

from __future__ import annotations

__all__ = [
    "BUDGET",
    "CHECK_ERROR",
    "FALLBACK_ERROR",
    "MISSING_VALUE",
    "NO_SOURCE",
    "REVIEW_POLICIES",
    "REVIEW_UNRESOLVED",
    "SOURCE_UNAVAILABLE",
    "AnswerBatchError",
    "AnswerCheck",
    "AnswerFlowDefinitionError",
    "AnswerFlowEngine",
    "AnswerIssue",
    "AnswerItem",
    "AnswerResult",
    "RecoveryResult",
    "ReviewPolicy",
    "define_answer_flow",
    "validate_answer_batch",
]

import inspect
import logging
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol, get_args

from pydantic import BaseModel, Field, ValidationError

from durafact._core.ids import FINAL_STAGE, answer_stage

logger = logging.getLogger("durafact._core.answer_flow")

# Issue codes the flow itself raises; hooks are free to use codes of their own.
CHECK_ERROR = "CHECK_ERROR"
MISSING_VALUE = "MISSING_VALUE"
BUDGET = "BUDGET"
SOURCE_UNAVAILABLE = "SOURCE_UNAVAILABLE"
NO_SOURCE = "NO_SOURCE"
REVIEW_UNRESOLVED = "REVIEW_UNRESOLVED"
FALLBACK_ERROR = "FALLBACK_ERROR"

ReviewPolicy = Literal["off", "optional", "required"]
REVIEW_POLICIES: tuple[str, ...] = get_args(ReviewPolicy)


class AnswerBatchError(ValueError):
    """A request that cannot be answered as given; raised before any hook runs."""


class AnswerFlowDefinitionError(ValueError):
    """A flow definition that could never run correctly; raised by `define_answer_flow`."""


class AnswerIssue(BaseModel):
    """Why a value was rejected or an item ended as it did; `code` is for machines."""

    code: str
    message: str


class AnswerCheck(BaseModel):
    """One verdict on one value, from the local `check` or from the `review`."""

    status: Literal["passed", "failed"]
    issues: list[AnswerIssue] = Field(default_factory=list)


class AnswerItem(BaseModel):
    """One unit of answering; `input_ids` are the request inputs it answers.

    An item whose source is `unavailable` (it could not be read) or `none` (it has
    none) is never generated: it still exists so that its inputs are explicitly
    handled (by `fallback`, with the issue `SOURCE_UNAVAILABLE` or `NO_SOURCE`)
    instead of silently dropped.
    """

    id: str
    input_ids: list[str]
    source_status: Literal["ready", "unavailable", "none"] = "ready"
    data: Any = None


class AnswerResult(BaseModel):
    """How one item ended.

    `checks` is every verdict the item got, in order (local and review, one failed
    check per missing value or raising check); `issues` are the issues that decided
    the final status (for an accepted item, only notes such as an unresolved
    optional review); `rounds` counts the generate rounds that included the item.
    """

    item_id: str
    input_ids: list[str]
    status: Literal["accepted", "fallback", "blocked"]
    value: Any = None
    checks: list[AnswerCheck] = Field(default_factory=list)
    issues: list[AnswerIssue] = Field(default_factory=list)
    rounds: int = 0


class RecoveryResult(BaseModel):
    """What `fallback` did: `handled` with a replacement `value`, or not handled."""

    handled: bool
    value: Any = None


class Generate(Protocol):
    """`generate(ctx, items, *, repairs, previous)`, sync or async; see define_answer_flow."""

    def __call__(
        self,
        ctx: Any,
        items: list[AnswerItem],
        *,
        repairs: dict[str, list[AnswerIssue]] | None,
        previous: dict[str, Any] | None,
    ) -> Awaitable[Mapping[str, Any]] | Mapping[str, Any]: ...


CanInvoke = Callable[[Any], bool]
Check = Callable[[AnswerItem, Any], AnswerCheck]
Review = Callable[
    [Any, list[tuple[AnswerItem, Any]]],
    Awaitable[Mapping[str, AnswerCheck]] | Mapping[str, AnswerCheck],
]
Fallback = Callable[[AnswerItem, list[AnswerIssue]], RecoveryResult]
Observe = Callable[[Any, str, list[AnswerResult]], Awaitable[None] | None]


def _is_int(value: object) -> bool:
    """An int that is not a bool: `True` as a batch size is a bug, not a 1."""
    return isinstance(value, int) and not isinstance(value, bool)


def _is_list_like(value: object) -> bool:
    return isinstance(value, Sequence) and not isinstance(value, str | bytes)


def _checked_batch(input_ids: Any, items: Any, max_items: Any) -> list[AnswerItem]:
    """The batch's items as `AnswerItem`s, or an `AnswerBatchError` naming the problem."""
    if not _is_int(max_items) or max_items < 1:
        raise AnswerBatchError(f"max_items must be a positive integer, got {max_items!r}")
    if not _is_list_like(input_ids):
        raise AnswerBatchError(
            f"input_ids must be a list of strings, got {type(input_ids).__name__}"
        )
    if not input_ids:
        raise AnswerBatchError("the request has no input ids: there is nothing to answer")
    request: set[str] = set()
    for input_id in input_ids:
        if not isinstance(input_id, str):
            raise AnswerBatchError(f"input id {input_id!r} is not a string")
        if input_id in request:
            raise AnswerBatchError(f"input id {input_id!r} appears more than once in the request")
        request.add(input_id)

    if not _is_list_like(items):
        raise AnswerBatchError(f"items must be a list of AnswerItem, got {type(items).__name__}")
    if not items:
        raise AnswerBatchError("the request has no items: every input id needs an item")
    if len(items) > max_items:
        raise AnswerBatchError(
            f"the request has {len(items)} items, more than max_items={max_items}"
        )
    batch: list[AnswerItem] = []
    for index, raw in enumerate(items):
        try:
            batch.append(raw if isinstance(raw, AnswerItem) else AnswerItem.model_validate(raw))
        except ValidationError as exc:
            raise AnswerBatchError(f"item {index} is not a valid AnswerItem: {exc}") from None

    item_ids: set[str] = set()
    covered: set[str] = set()
    for item in batch:
        if item.id in item_ids:
            raise AnswerBatchError(f"two items share the id {item.id!r}")
        item_ids.add(item.id)
        if not item.input_ids:
            raise AnswerBatchError(
                f"item {item.id!r} has no input ids: every item must answer at least one input"
            )
        for input_id in item.input_ids:
            if input_id not in request:
                raise AnswerBatchError(
                    f"item {item.id!r} names input id {input_id!r}, which is not in the request"
                )
            if item.input_ids.count(input_id) > 1:
                raise AnswerBatchError(f"item {item.id!r} names input id {input_id!r} twice")
        covered.update(item.input_ids)
    uncovered = [input_id for input_id in input_ids if input_id not in covered]
    if uncovered:
        names = ", ".join(repr(input_id) for input_id in uncovered)
        raise AnswerBatchError(
            f"input id {names} is covered by no item: every input needs an explicit "
            "item, an unavailable one included"
        )
    return batch


def validate_answer_batch(input_ids: Sequence[str], items: Sequence[Any], max_items: int) -> None:
    """Raise `AnswerBatchError` unless the batch can be answered as given.

    Checks, in this order: `max_items` is a positive int; `input_ids` is a non-empty
    list of distinct strings; there is at least one item and at most `max_items`;
    every item is an `AnswerItem` (or validates as one, e.g. a dict from a JSON file);
    item ids are distinct; every item has input ids, all of them in the request; and
    every input id of the request is covered by some item. An input may be split
    across several items. Nothing runs, so a bad request loses nothing.
    """
    _checked_batch(input_ids, items, max_items)


def _discard(value: object) -> None:
    """Close a coroutine a sync hook returned by mistake, so it warns nowhere."""
    if inspect.iscoroutine(value):
        value.close()


async def _resolve(value: Any) -> Any:
    return await value if inspect.isawaitable(value) else value


def _issue(code: str, message: str) -> AnswerIssue:
    return AnswerIssue(code=code, message=message)


def _failed(code: str, message: str) -> AnswerCheck:
    return AnswerCheck(status="failed", issues=[_issue(code, message)])


def _error_text(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"


class AnswerFlowEngine:
    """A defined answer flow; `run` answers one batch. Build it with `define_answer_flow`."""

    __slots__ = (
        "_max_items",
        "_max_repairs",
        "_review_policy",
        "_can_invoke",
        "_generate",
        "_check",
        "_review",
        "_fallback",
        "_observe",
    )

    def __init__(
        self,
        *,
        max_items: int,
        max_repairs: int,
        review_policy: ReviewPolicy,
        can_invoke: CanInvoke,
        generate: Generate,
        check: Check,
        review: Review | None,
        fallback: Fallback,
        observe: Observe | None,
    ) -> None:
        self._max_items = max_items
        self._max_repairs = max_repairs
        self._review_policy = review_policy
        self._can_invoke = can_invoke
        self._generate = generate
        self._check = check
        self._review = review
        self._fallback = fallback
        self._observe = observe

    @property
    def max_items(self) -> int:
        return self._max_items

    @property
    def max_repairs(self) -> int:
        return self._max_repairs

    @property
    def review_policy(self) -> ReviewPolicy:
        return self._review_policy

    async def run(
        self, input_ids: Sequence[str], items: Sequence[Any], ctx: Any = None
    ) -> list[AnswerResult]:
        """Answer one batch: one `AnswerResult` per item, in the order of `items`.

        Raises `AnswerBatchError` (before any hook runs) for an invalid batch. An
        exception from `generate` or `can_invoke` propagates: it is an infrastructure
        failure or a bug, for the caller's workflow (and Temporal's retries) to own.
        """
        batch = _checked_batch(input_ids, items, self._max_items)
        return await _Run(self, batch, ctx).execute()

    def __repr__(self) -> str:
        return (
            f"AnswerFlowEngine(max_items={self._max_items}, max_repairs={self._max_repairs}, "
            f"review_policy={self._review_policy!r})"
        )


@dataclass
class _State:
    """One item's progress through a run."""

    item: AnswerItem
    rounds: int = 0
    checks: list[AnswerCheck] = field(default_factory=list)
    issues: list[AnswerIssue] = field(default_factory=list)
    value: Any = None
    has_value: bool = False
    result: AnswerResult | None = None

    def settle(self, status: str, value: Any, issues: list[AnswerIssue]) -> None:
        self.result = AnswerResult(
            item_id=self.item.id,
            input_ids=list(self.item.input_ids),
            status=status,
            value=value,
            checks=list(self.checks),
            issues=list(issues),
            rounds=self.rounds,
        )

    def snapshot(self) -> AnswerResult:
        """A copy for `observe`; an item still in flight shows as provisionally blocked."""
        if self.result is not None:
            return self.result.model_copy(deep=True)
        return AnswerResult(
            item_id=self.item.id,
            input_ids=list(self.item.input_ids),
            status="blocked",
            checks=[c.model_copy(deep=True) for c in self.checks],
            issues=[i.model_copy() for i in self.issues],
            rounds=self.rounds,
        )


class _Run:
    """One `AnswerFlowEngine.run`: the rounds, the review, the budget and the fallbacks."""

    def __init__(self, flow: AnswerFlowEngine, items: list[AnswerItem], ctx: Any) -> None:
        self.flow = flow
        self.ctx = ctx
        self.states = [_State(item) for item in items]
        self.reviewing = flow.review_policy != "off" and flow._review is not None
        self.required = flow.review_policy == "required"

    async def execute(self) -> list[AnswerResult]:
        for state in self.states:
            if state.item.source_status == "unavailable":
                message = f"the source of item {state.item.id!r} is unavailable"
                self.recover(state, [_issue(SOURCE_UNAVAILABLE, message)])
            elif state.item.source_status == "none":
                message = f"item {state.item.id!r} has no source to answer from"
                self.recover(state, [_issue(NO_SOURCE, message)])
        waiting = [state for state in self.states if state.result is None]
        for round_no in range(self.flow.max_repairs + 1):
            if not waiting:
                break
            stage = answer_stage(round_no)
            if not self.may_invoke():
                budget = _issue(BUDGET, f"can_invoke refused the generate call of {stage}")
                for state in waiting:
                    self.recover(state, [*state.issues, budget])
                break
            stopped = await self.round(round_no, stage, waiting)
            await self.observe(stage)
            if stopped:
                break
            waiting = [state for state in waiting if state.result is None]
        for state in self.states:
            if state.result is None:  # still failing after the last round
                self.recover(state, state.issues)
        await self.observe(FINAL_STAGE)
        results = [state.result for state in self.states]
        assert all(results), "every item settles exactly once"
        return results  # type: ignore[return-value]

    async def round(self, round_no: int, stage: str, waiting: list[_State]) -> bool:
        """Generate, check and review the waiting items; True if the budget stopped the run."""
        repairs: dict[str, list[AnswerIssue]] | None = None
        previous: dict[str, Any] | None = None
        if round_no > 0:
            repairs = {s.item.id: list(s.issues) for s in waiting}
            previous = {s.item.id: s.value for s in waiting if s.has_value}
        values = await _resolve(
            self.flow._generate(
                self.ctx, [s.item for s in waiting], repairs=repairs, previous=previous
            )
        )
        if not isinstance(values, Mapping):
            raise TypeError(
                f"generate must return a mapping of item id to value, got {type(values).__name__}"
            )

        passed: list[_State] = []
        for state in waiting:
            state.rounds += 1
            state.has_value = state.item.id in values
            state.value = values.get(state.item.id)
            if state.has_value:
                verdict = self.check(state)
            else:
                verdict = _failed(
                    MISSING_VALUE, f"generate returned no value for {state.item.id!r}"
                )
            state.checks.append(verdict)
            if verdict.status == "passed":
                passed.append(state)
            else:
                state.issues = list(verdict.issues)

        if not (self.reviewing and passed):
            for state in passed:
                state.settle("accepted", state.value, [])
            return False
        if not self.may_invoke():
            self.stop_before_review(round_no, stage, waiting, passed)
            return True
        for state, outcome in zip(passed, await self.review(passed), strict=True):
            if isinstance(outcome, str):  # unresolved
                note = _issue(REVIEW_UNRESOLVED, outcome)
                if self.required:
                    state.settle("blocked", None, [note])
                else:
                    state.settle("accepted", state.value, [note])
                continue
            state.checks.append(outcome)
            if outcome.status == "passed":
                state.settle("accepted", state.value, [])
            else:
                state.issues = list(outcome.issues)
        return False

    def stop_before_review(
        self, round_no: int, stage: str, waiting: list[_State], passed: list[_State]
    ) -> None:
        """Budget says no to the review: settle everything; nothing more is called.

        Under `required` an unreviewed item cannot be accepted, so it goes to
        fallback; under `optional` the local verdict stands, as for any unresolved
        review, with the BUDGET issue as a note. Items that failed this round would
        have been repaired, so they get BUDGET too, unless this was the last round
        anyway (then they are simply exhausted).
        """
        budget = _issue(BUDGET, f"can_invoke refused the review call of {stage}")
        for state in passed:
            if self.required:
                self.recover(state, [budget])
            else:
                state.settle("accepted", state.value, [budget])
        more_rounds = round_no < self.flow.max_repairs
        for state in waiting:
            if state.result is None:
                self.recover(state, [*state.issues, budget] if more_rounds else state.issues)

    def may_invoke(self) -> bool:
        answer = self.flow._can_invoke(self.ctx)
        if not isinstance(answer, bool):
            _discard(answer)
            raise TypeError(
                f"can_invoke must return a bool synchronously, got {type(answer).__name__}"
            )
        return answer

    def check(self, state: _State) -> AnswerCheck:
        """The local verdict; a check that raises or returns nonsense is a CHECK_ERROR."""
        try:
            verdict = self.flow._check(state.item, state.value)
        except Exception as exc:
            return _failed(CHECK_ERROR, f"check raised {_error_text(exc)}")
        if inspect.isawaitable(verdict):
            _discard(verdict)
            return _failed(CHECK_ERROR, "check returned an awaitable; check must be synchronous")
        if isinstance(verdict, AnswerCheck):
            return verdict
        try:
            return AnswerCheck.model_validate(verdict)
        except ValidationError as exc:
            return _failed(CHECK_ERROR, f"check returned an invalid AnswerCheck: {exc}")

    async def review(self, passed: list[_State]) -> list[AnswerCheck | str]:
        """One verdict per submitted item, or the reason it is unresolved."""
        review = self.flow._review
        assert review is not None  # `reviewing` is only True with a review
        pairs = [(state.item, state.value) for state in passed]
        try:
            verdicts = await _resolve(review(self.ctx, pairs))
        except Exception as exc:
            return [f"review raised {_error_text(exc)}"] * len(passed)
        if not isinstance(verdicts, Mapping):
            reason = f"review returned {type(verdicts).__name__}, not a mapping of id to check"
            return [reason] * len(passed)
        outcomes: list[AnswerCheck | str] = []
        for state in passed:
            if state.item.id not in verdicts:
                outcomes.append(f"review did not cover item {state.item.id!r}")
                continue
            verdict = verdicts[state.item.id]
            try:
                outcomes.append(
                    verdict
                    if isinstance(verdict, AnswerCheck)
                    else AnswerCheck.model_validate(verdict)
                )
            except ValidationError as exc:
                outcomes.append(f"review returned an invalid check: {exc}")
        return outcomes

    def recover(self, state: _State, issues: list[AnswerIssue]) -> None:
        """Settle a failed item through `fallback`: fallback, blocked, or FALLBACK_ERROR."""
        try:
            outcome = self.flow._fallback(state.item, list(issues))
            if inspect.isawaitable(outcome):
                _discard(outcome)
                raise TypeError("fallback returned an awaitable; fallback must be synchronous")
            if not isinstance(outcome, RecoveryResult):
                outcome = RecoveryResult.model_validate(outcome)
        except Exception as exc:
            error = _issue(FALLBACK_ERROR, f"fallback raised {_error_text(exc)}")
            state.settle("blocked", None, [*issues, error])
            return
        if not outcome.handled:
            state.settle("blocked", None, issues)
        elif outcome.value is None:
            error = _issue(FALLBACK_ERROR, "fallback reported handled but supplied no value")
            state.settle("blocked", None, [*issues, error])
        else:
            state.settle("fallback", outcome.value, issues)

    async def observe(self, stage_id: str) -> None:
        if self.flow._observe is None:
            return
        snapshot = [state.snapshot() for state in self.states]
        try:
            await _resolve(self.flow._observe(self.ctx, stage_id, snapshot))
        except Exception:
            logger.warning(
                "observe failed at stage %r; the flow result is unchanged", stage_id, exc_info=True
            )


def define_answer_flow(
    *,
    max_items: int,
    max_repairs: int,
    review_policy: ReviewPolicy = "optional",
    can_invoke: CanInvoke,
    generate: Generate,
    check: Check,
    review: Review | None = None,
    fallback: Fallback,
    observe: Observe | None = None,
) -> AnswerFlowEngine:
    """Define a reusable answer flow; `AnswerFlowDefinitionError` if it could never run.

    Limits: `max_items` (positive int) caps one batch; `max_repairs` (int >= 0) gives
    at most `max_repairs + 1` generate rounds. `review_policy` is one of
    `REVIEW_POLICIES`: `off` never reviews; `optional` (default) reviews when a
    `review` is given, and an unresolved review leaves the local verdict standing;
    `required` needs a `review`, and an unresolved review blocks the item.

    Hooks (`ctx` is whatever `run` was given, passed through untouched, always first):

    - `can_invoke(ctx) -> bool`, sync: asked before every `generate` and `review`
      call. A False ends the run: the items still waiting get an issue `BUDGET` and
      go to fallback (under `optional`, items awaiting review keep their local
      verdict, with `BUDGET` as a note), and nothing more is generated or reviewed.
    - `generate(ctx, items, *, repairs, previous) -> Mapping[id, value]`, sync or
      async. Round 0 gets every `ready` item with `repairs=None, previous=None`; a
      repair round gets only the failing items, `repairs` with each one's issues and
      `previous` with each one's rejected value (items that had no value are absent).
      An item missing from the mapping fails with `MISSING_VALUE`.
    - `check(item, value) -> AnswerCheck`, sync, local, deterministic; run only on
      values that are present. Raising (or returning no valid check) fails the item
      with `CHECK_ERROR`.
    - `review(ctx, pairs) -> Mapping[id, AnswerCheck]`, sync or async: one batch
      call per round for the `(item, value)` pairs that passed the local check. A
      failed verdict sends the item to repair with the review's issues. Unresolved
      (`REVIEW_UNRESOLVED`) means the review raised, returned no mapping, or left the
      item out or gave it an invalid check.
    - `fallback(item, issues) -> RecoveryResult`, sync: for unavailable sources
      (`SOURCE_UNAVAILABLE`), items still failing after the last round (their last
      issues) and budget stops. `handled` with a non-None value -> `fallback`; not
      handled -> `blocked`; raising, or handled with no value -> `blocked` with
      `FALLBACK_ERROR`.
    - `observe(ctx, stage_id, results)`, sync or async: after each round that ran
      (`generate:0`, `repair:1`, ...) and at `final`, a copy of one result per item
      in item order. Settled items show their final result; items still waiting for
      repair show as `blocked`, without a value, with their current issues, checks
      and rounds. Its exceptions are logged and never change the result.
    """
    if not _is_int(max_items) or max_items < 1:
        raise AnswerFlowDefinitionError(f"max_items must be a positive integer, got {max_items!r}")
    if not _is_int(max_repairs) or max_repairs < 0:
        raise AnswerFlowDefinitionError(
            f"max_repairs must be a non-negative integer, got {max_repairs!r}"
        )
    if review_policy not in REVIEW_POLICIES:
        valid = ", ".join(repr(policy) for policy in REVIEW_POLICIES)
        raise AnswerFlowDefinitionError(
            f"review_policy must be one of {valid}, got {review_policy!r}"
        )
    hooks = {"can_invoke": can_invoke, "generate": generate, "check": check, "fallback": fallback}
    for name, hook in hooks.items():
        if not callable(hook):
            raise AnswerFlowDefinitionError(f"{name} must be a callable, got {hook!r}")
    for name, hook in {"review": review, "observe": observe}.items():
        if hook is not None and not callable(hook):
            raise AnswerFlowDefinitionError(f"{name} must be a callable or None, got {hook!r}")
    if review_policy == "required" and review is None:
        raise AnswerFlowDefinitionError(
            "review_policy='required' needs a review hook: without one no item could be accepted"
        )
    return AnswerFlowEngine(
        max_items=max_items,
        max_repairs=max_repairs,
        review_policy=review_policy,
        can_invoke=can_invoke,
        generate=generate,
        check=check,
        review=review,
        fallback=fallback,
        observe=observe,
    )
