"""ApprovalGate: a stage that asks a person to approve a report before it becomes the reply.

Not a lifecycle but a small object any hook of any recipe can use. Configure it
with the callables that need judgement, then ask from wherever the recipe needs
a person:

    self.gate = ApprovalGate(
        question=self.question,      # (ctx, report) -> the question's text
        on_approve=self.send,        # async (ctx, report) -> the reply
        on_reject=self.keep,         # async (ctx, report, outcome) -> the reply
        revise=self.revise,          # optional: async (ctx, report, outcome) -> report | None
    )
    gated = await self.gate.ask(ctx, thread, report)   # -> GateResult: outcome, final

Contract. `ask` puts the question through `ctx.ask_approval` (kind `approve`),
which waits durably, as long as it takes or until the policy's timeout, for the
`answer` signal or the `decide` update. The thread keeps its whole question
history (`approval:{thread}:1`, `:2`, ...), so asking again in a thread, after a
rejection or from a later hook, continues its chain instead of opening a second
one. An approval goes to `on_approve`. A rejection that carries `changes` goes
to `revise` when the gate has one: a new report is asked about again (question
n + 1 of the thread), None ends the gate; any other rejection, a timed-out one
included, goes to `on_reject`.

Artifacts. The reply is `reply:{thread}`, linked `approved_by` or `rejected_by`
the question that decided it, and `based_on` the report when `ask` is given the
report's artifact id (`report_id`). The reply callables' model calls are named
after it (`llm:reply:{thread}`).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Generic, TypeVar

from pydantic import BaseModel

from durafact._core.approval import ApprovalOutcome, ApprovalPolicy
from durafact._core.ids import reply_id
from durafact._recipes.recipe import RecipeContext

Rep = TypeVar("Rep", bound=BaseModel)
Fin = TypeVar("Fin", bound=BaseModel)


@dataclass
class GateResult(Generic[Fin]):
    """How a gate ended: the outcome that decided it and the final reply."""

    outcome: ApprovalOutcome
    final: Fin

    @property
    def approved(self) -> bool:
        return self.outcome.approved


@dataclass(frozen=True)
class ApprovalGate(Generic[Rep, Fin]):
    """Ask a person to approve a report; the reply comes from `on_approve` or `on_reject`."""

    question: Callable[[RecipeContext, Rep], str]
    """The text a person is asked about a report."""
    on_approve: Callable[[RecipeContext, Rep], Awaitable[Fin]]
    """The reply once the report is approved."""
    on_reject: Callable[[RecipeContext, Rep, ApprovalOutcome], Awaitable[Fin]]
    """The reply once the report is rejected (or nobody answered in time)."""
    revise: Callable[[RecipeContext, Rep, ApprovalOutcome], Awaitable[Rep | None]] | None = None
    """A rejection carried `changes`: the report rebuilt from them, to be asked about again,
    or None to end with `on_reject`. Without it, changes are not taken."""

    async def ask(
        self,
        ctx: RecipeContext,
        thread: str,
        report: Rep,
        policy: ApprovalPolicy | None = None,
        *,
        report_id: str | None = None,
    ) -> GateResult[Fin]:
        """Ask in `thread` until approved, or rejected without a revision; record the reply."""
        while True:
            outcome = await ctx.ask_approval(thread, self.question(ctx, report), policy)
            if outcome.approved or not outcome.changes or self.revise is None:
                break
            revised = await self.revise(ctx, report, outcome)
            if revised is None:
                break
            report = revised
        fid = reply_id(thread)
        with ctx.scoped(fid):
            if outcome.approved:
                final = await self.on_approve(ctx, report)
            else:
                final = await self.on_reject(ctx, report, outcome)
        ledger = ctx.ledger
        ledger.create(fid, final)
        if report_id is not None:
            ledger.link(fid, "based_on", report_id)
        ledger.link(fid, "approved_by" if outcome.approved else "rejected_by", outcome.question_id)
        return GateResult(outcome=outcome, final=final)
