"""A run's budget as it stands: checked before each model call and each child, charged
after, stopped or extended when spent (`ctx.spending`; the arithmetic is `durafact._core.budget`).

- `before(committed)`: before a model call (its `max_tokens` committed) or a child. With
  the budget spent, `fail` ends the run: status `over_budget`, and the non-retryable
  `ApplicationError` type `OverBudget` whose details are the `Spent` usage, so the
  run's artifacts stay as they are and its failure says what was spent. `ask` asks a
  person (`ctx.ask_approval`, thread `budget`): an approval extends the budget by its
  first limits, or to the limits it sets (`approve --set tokens=80000`); a rejection or
  the budget's `ask_timeout` ends the run `over_budget`. Concurrent calls ask once.
- `charge(usage)`: after a call, from its recorded result, so a retried activity or a
  replay never counts a call twice. A cost budget needs every call priced: a call whose
  cost is None fails the run (`UnpricedModel`) naming the model and DURAFACT_PRICES.
- `for_child()`: what a child run draws (the remaining budget); `ctx.run_child` charges
  what it spent, from its result or (`child_failed`) its failure's `Spent`.

Why a failure, not a result: `over_budget` must end any recipe the same way, also one a
user wrote whose result has no place for "stopped early"; a non-retryable error with a
named type does, and Temporal shows it as the run's end without retrying it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Protocol

from temporalio.exceptions import ApplicationError, ChildWorkflowError, FailureError

from durafact._core.approval import ApprovalKind, ApprovalOutcome, ApprovalPolicy
from durafact._core.budget import Budget, Spent
from durafact._core.llm import Usage

# DurafactStatus (and the recipe status) of a run its budget stopped.
OVER_BUDGET = "over_budget"
# The error type a stopped run fails with, and that of a cost budget with no price.
OVER_BUDGET_ERROR = "OverBudget"
UNPRICED_MODEL = "UnpricedModel"
# The thread of a run's budget questions: `approval:budget:{n}`.
BUDGET_THREAD = "budget"


class Run(Protocol):
    """What spending uses of its run's context (`durafact._recipes.recipe.RecipeContext`)."""

    usage: Usage
    status: str

    def set_status(self, status: str, message: str | None = None, *, phase: str = "") -> None: ...

    def announce(self, message: str, kind: str = "info") -> None: ...

    async def ask_approval(
        self,
        thread: str,
        text: str,
        policy: ApprovalPolicy | None = None,
        kind: ApprovalKind = "approve",
        settable: Sequence[str] = (),
    ) -> ApprovalOutcome: ...


class Spending:
    """`ctx.spending`: the run's budget (None: unlimited) and what it does when spent."""

    def __init__(self, ctx: Run) -> None:
        self._ctx = ctx
        self.budget: Budget | None = None
        # The budget the run started with: a plain approval extends by its limits.
        self._first: Budget | None = None
        self._asking = asyncio.Lock()
        # What the call that asks may write: a limit an approval sets must leave room for it.
        self._committed = 0

    def start(self, budget: Budget | None) -> None:
        self.budget = self._first = budget

    def allows(self) -> bool:
        """Whether a call may start without asking (sync, for AnswerFlow's `can_invoke`):
        no budget, budget left, or a budget that asks when spent."""
        budget = self.budget
        return budget is None or budget.on_exhausted == "ask" or not self._spent(0)

    async def before(self, committed: int = 0) -> None:
        """Return once a call that may write `committed` tokens may start; raise the
        `OverBudget` error when the budget is spent and may not (see the module doc)."""
        if self.budget is None or not self._spent(committed):
            return
        async with self._asking:  # a call that waited here sees the extension
            while self._spent(committed):
                if self.budget.on_exhausted == "fail":
                    raise self.stop()
                outcome = await self._ask(committed)
                if not outcome.approved:
                    raise self.stop(refused=outcome)

    def charge(self, usage: Usage, model: str = "") -> None:
        """Add a call's (or a child's) usage to the run's."""
        ctx = self._ctx
        ctx.usage += usage
        if self.budget is not None and self.budget.cost is not None and usage.cost is None:
            what = f"the model {model!r}" if model else "a model of a child run"
            raise ApplicationError(
                f"the budget limits cost to {self.budget.cost}, but {what} has no price on the "
                "worker: add it to DURAFACT_PRICES, or give the budget tokens only",
                Spent(usage=ctx.usage, budget=self.budget),
                type=UNPRICED_MODEL,
                non_retryable=True,
            )

    def for_child(self) -> Budget | None:
        """A child's budget: what is left of this run's (None without one)."""
        return self.budget.remaining(self._ctx.usage) if self.budget else None

    def child_failed(self, exc: ChildWorkflowError, child_id: str) -> None:
        """Charge what a failed child spent (its failure's `Spent`); when its budget
        stopped it, this run stops too (raise): the child drew this run's last tokens."""
        cause = exc.cause
        spent = Spent.among(cause.details) if isinstance(cause, ApplicationError) else None
        if spent is not None:
            self.charge(spent.usage)
        if isinstance(cause, ApplicationError) and cause.type == OVER_BUDGET_ERROR:
            raise self.stop(f"child {child_id} stopped: {cause.message}")

    def spent_text(self) -> str:
        """`spent 41,200 of 40,000 tokens (cost 0.83)`, or the tokens without a budget."""
        usage = self._ctx.usage
        return (
            self.budget.spent_text(usage) if self.budget else f"spent {usage.total_tokens:,} tokens"
        )

    def stop(self, why: str = "", refused: ApprovalOutcome | None = None) -> ApplicationError:
        """The run's status `over_budget` and the error that ends it."""
        ctx = self._ctx
        text = self.spent_text()
        if refused is not None:
            verdict = "timed out" if refused.timed_out else "rejected"
            reason = f": {refused.reason}" if refused.reason and not refused.timed_out else ""
            why = f"{refused.question_id} {verdict}{reason}"
        message = f"over budget: {text}" + (f" ({why})" if why else "")
        ctx.set_status(OVER_BUDGET, message, final=True)
        return ApplicationError(
            message,
            Spent(usage=ctx.usage, budget=self.budget),
            type=OVER_BUDGET_ERROR,
            non_retryable=True,
        )

    def _spent(self, committed: int) -> bool:
        return self.budget is not None and self.budget.exhausted(self._ctx.usage, committed)

    async def _ask(self, committed: int) -> ApprovalOutcome:
        """Ask to go on; an approval extends the budget (its changes were checked by
        `check_extension` before it was taken) and puts the status back."""
        ctx = self._ctx
        budget, first = self.budget, self._first
        assert budget is not None and first is not None
        status = ctx.status
        self._committed = committed
        outcome = await ctx.ask_approval(
            BUDGET_THREAD,
            budget.question(ctx.usage, first, committed),
            ApprovalPolicy(timeout=budget.ask_timeout),
            settable=budget.limited(),
        )
        if outcome.approved:
            try:
                self.budget = budget.extended(first, outcome.changes, ctx.usage, committed)
            except ValueError as refusal:  # a call in flight spent more while it waited
                ctx.announce(f"the new limit does not do: {refusal}; asking again", "warning")
                return outcome
            ctx.announce(f"budget extended: {self.budget.describe()}", kind="budget")
            ctx.set_status(status)
        return outcome

    def check_extension(self, changes: dict[str, str]) -> None:
        """ValueError when an approval's changes cannot extend the budget: what the
        `decide` validator refuses before anything is written to history."""
        if self.budget is None or self._first is None:
            return
        self.budget.extended(self._first, changes, self._ctx.usage, self._committed)


def spent_of(exc: BaseException) -> Spent | None:
    """The `Spent` a failure already carries (an over-budget run's, a child's report)."""
    if isinstance(exc, ApplicationError):
        return Spent.among(exc.details)
    return None


def with_spent(exc: FailureError, usage: Usage) -> ApplicationError:
    """A child run's failure, reported with what it spent: the first application error
    in its chain, type and message kept (what `durafact result` shows is unchanged),
    with `Spent` added to its details; raise it `from exc`, so the chain stays."""
    node: BaseException | None = exc
    while node is not None and not isinstance(node, ApplicationError):
        node = node.__cause__
    first = node if isinstance(node, ApplicationError) else None
    return ApplicationError(
        first.message if first else str(exc) or type(exc).__name__,
        *(first.details if first is exc else ()),
        Spent(usage=usage),
        type=first.type if first else type(exc).__name__,
        non_retryable=True,
    )
