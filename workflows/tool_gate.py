"""The gate in front of every tool call of a ReAct run or a chat: policy, memory, person.

`gate_tool_call` asks the run's `ToolPolicy` (durafact/tool_policy.py) first: `allow`
runs the call, `deny` refuses it without asking anyone ("denied by policy: RULE").
`ask` looks for a remembered decision that covers the call (the artifacts
`approval-rule:...` in the ledger) and, finding one, follows it and announces that it
did; else it asks a person (`ctx.ask_approval` on the run's tool thread, the question
naming the rule that asked). An answer that says `remember` becomes such an artifact:
who answered, when, the scope, the tool, the argument hash, the verdict and the
question. The calls of one native turn are gated at once, so a question for a call
that such an answer covers may be waiting beside it: it is answered with the same
verdict, by the decision (`settle_covered`), instead of waiting for a person.

A run holds the decisions it was given (`hold_remembered`: a PlanReAct parent's, a
chat's earlier runs') in its ledger too, so every decision the run follows is there.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

from temporalio import workflow

from durafact.approval import ApprovalAnswer, ApprovalPolicy, ApprovalQuestion, RememberScope
from durafact.ledger import Ledger
from durafact.react import not_approved_message
from durafact.tool_policy import (
    RememberedDecision,
    ToolPolicy,
    arguments_hash,
    denied_message,
    remembered_for,
)
from durafact.tools import ToolCall
from workflows.recipe import RecipeContext

# Runs started since this patch answer the questions waiting beside a remembered answer
# that covers them (see `settle_covered`); older runs kept asking a person.
SETTLES_COVERED = "durafact-remembered-settles-covered"


class Refusal(NamedTuple):
    """Why a call does not run: its failed observation's error type and text."""

    error_type: str
    text: str


async def gate_tool_call(
    ctx: RecipeContext,
    thread: str,
    call: ToolCall,
    *,
    destructive: bool,
    policy: ToolPolicy,
    approval: ApprovalPolicy,
    question: str,
    remember: Sequence[RememberScope],
) -> Refusal | None:
    """None when the call may run; else why not. `question` is what a person is asked,
    `remember` the scopes their answer may remember."""
    decision = policy.decide(call.name, call.arguments, destructive)
    if decision.action == "allow":
        return None
    if decision.action == "deny":
        ctx.announce(f"{call.name} {denied_message(decision.rule)}", kind="policy")
        return Refusal("DeniedByPolicy", denied_message(decision.rule))
    known = remembered_for(remembered(ctx.ledger), call.name, call.arguments)
    if known is not None:
        verdict = "approved" if known.approved else "rejected"
        ctx.announce(
            f"{call.name} {verdict} without asking: {known.id} ({known.by or 'a person'} "
            f"answered {known.question_id})",
            kind="remembered",
        )
        return None if known.approved else Refusal("NotApproved", not_approved_message(known.why))
    digest = arguments_hash(call.arguments)
    outcome = await ctx.ask_approval(
        thread,
        question,
        approval,
        rule=decision.rule,
        remember=remember,
        tool=call.name,
        arguments_hash=digest,
    )
    if outcome.remember is not None:
        answer = ctx.ledger.get(outcome.question_id).typed(ApprovalQuestion).data.answer
        rule = RememberedDecision(
            scope=outcome.remember,
            tool=call.name,
            arguments_hash=digest if outcome.remember == "call" else None,
            approved=outcome.approved,
            reason=outcome.reason,
            by=answer.by if answer else "",
            at=workflow.now(),
            question_id=outcome.question_id,
        )
        hold_remembered(ctx.ledger, [rule])
        ctx.announce(f"remembered as {rule.id}", kind="remembered")
        settle_covered(ctx, rule)
    if outcome.approved:
        return None
    return Refusal("NotApproved", not_approved_message(outcome.reason))


def settle_covered(ctx: RecipeContext, rule: RememberedDecision) -> None:
    """Answer, with `rule`'s verdict, every waiting tool question whose call it covers:
    the other calls of the turn `rule` was made in, asked at the same time."""
    covered = [
        q
        for q in ctx.pending_questions()
        if q.tool is not None and rule.covers(q.tool, q.arguments_hash or "")
    ]
    if not covered or not workflow.patched(SETTLES_COVERED):
        return
    for question in covered:
        answer = ApprovalAnswer(
            question_id=question.id, approved=rule.approved, reason=rule.why, by=rule.id
        )
        ctx.receive_answer(answer)


def remembered(ledger: Ledger) -> list[RememberedDecision]:
    """Every decision the run holds, oldest first."""
    return [a.data for a in ledger.find_all(RememberedDecision)]


def hold_remembered(ledger: Ledger, decisions: Sequence[RememberedDecision]) -> None:
    """Keep `decisions` in the ledger (one artifact per id: the first one stays)."""
    for decision in decisions:
        if decision.id not in ledger:
            ledger.create(decision.id, decision)
