"""The gate in front of every tool call of a ReAct run or a chat: policy, memory, person.

What is judged is the call that will run. Unless the run's `ToolPolicy`
(durafact/_core/tool_policy.py) allows or denies the tool whatever its arguments, the call
is first bound (`bind`, the `bind_tool_call` activity): the worker parses, binds and
validates the arguments with the tool's own model and returns them as the tool will
receive them. Arguments that do not bind run nothing: the refusal is the call's
observation. The policy then judges the bound arguments: `allow` runs them, `deny`
refuses without asking anyone ("denied by policy: RULE"). `ask` looks for a
remembered decision that covers the call (the artifacts `approval-rule:...` in the
ledger: the most recent one that covers it settles it) and, finding one, follows it
and announces which; else it asks a person (`ctx.ask_approval` on the run's tool
thread), the question showing the whole call and naming the rule that asked. A call
too long to show whole is refused before anyone is asked. Whatever was judged runs
as it is (`Cleared.bound`: the tool refuses values its model would change).

An answer that says `remember` becomes such an artifact: who answered, when, the
scope, the tool, the hash of the bound arguments, the verdict and the question. The
calls of one native turn are judged at once (`judge_tool_call`), then cleared at once
(`clear_tool_call`) in the model's order, so their questions are asked in that order and
a question for a call that such an answer covers may be waiting beside it: it is
answered with the same verdict, by the decision (`settle_covered`), instead of waiting
for a person.

A run holds the decisions it was given (`hold_remembered`: a PlanReAct parent's, a
chat's earlier runs') in its ledger too, so every decision the run follows is there.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import NamedTuple

from temporalio import workflow

from durafact._core.approval import ApprovalAnswer, ApprovalPolicy, ApprovalQuestion, RememberScope
from durafact._core.ledger import Ledger
from durafact._core.react import not_approved_message
from durafact._core.text import plain_json
from durafact._core.tool_policy import (
    PolicyDecision,
    RememberedDecision,
    ToolPolicy,
    arguments_hash,
    denied_message,
    remembered_for,
)
from durafact._core.tools import BoundCall, ToolCall
from durafact._recipes.recipe import RecipeContext

# The most characters of arguments a question shows (the JSON of the bound call): a
# longer call is refused before it is asked, never shown cut.
MAX_ASKED_ARGUMENTS = 8_000

Binder = Callable[[ToolCall], Awaitable[BoundCall]]


class Refusal(NamedTuple):
    """Why a call does not run: its failed observation's error type and text."""

    error_type: str
    text: str


class Cleared(NamedTuple):
    """A call that may run: `call` as judged; `bound` when its arguments are the bound
    ones, which the tool must receive unchanged."""

    call: ToolCall
    bound: bool


class Judged(NamedTuple):
    """A call the policy allows or asks about, not yet cleared: `call` as judged, `bound`
    when its arguments are the bound ones, the policy's `decision`, and whether its tool
    is `destructive` (a question says so)."""

    call: ToolCall
    bound: bool
    decision: PolicyDecision
    destructive: bool


async def judge_tool_call(
    ctx: RecipeContext, call: ToolCall, *, destructive: bool, policy: ToolPolicy, bind: Binder
) -> Judged | Refusal:
    """The policy's decision on the call as it would run, or why it does not run (arguments
    that do not bind, a `deny` rule). `bind` binds a call's arguments (see the module's
    docstring)."""
    decision = policy.decide(call.name, None, destructive)
    bound = False
    if decision is None or decision.action == "ask":
        binding = await bind(call)
        if binding.arguments is None:
            return Refusal(binding.error_type or "InvalidArguments", binding.error)
        call, bound = call.model_copy(update={"arguments": binding.arguments}), True
        decision = policy.decide(call.name, call.arguments, destructive)
    assert decision is not None, "a policy decides on given arguments"
    if decision.action == "deny":
        ctx.announce(f"{call.name} {denied_message(decision.rule)}", kind="policy")
        return Refusal("DeniedByPolicy", denied_message(decision.rule))
    return Judged(call, bound, decision, destructive)


async def clear_tool_call(
    ctx: RecipeContext,
    thread: str,
    judged: Judged,
    *,
    approval: ApprovalPolicy,
    remember: Sequence[RememberScope],
    call_id: str | None = None,
) -> Cleared | Refusal:
    """The judged call to run, or why it does not run: an `ask` is settled by a remembered
    decision or a person. `remember` are the scopes a person's answer may remember;
    `call_id` names the call in a question (`ApprovalQuestion.tool_call_id`). The
    question is open before this first waits, so calls cleared one after another are
    asked in that order."""
    call, bound, decision, destructive = judged
    if decision.action == "allow":
        return Cleared(call, bound)
    refusal = await _ask(ctx, thread, call, destructive, decision, approval, remember, call_id)
    return refusal or Cleared(call, bound)


async def _ask(
    ctx: RecipeContext,
    thread: str,
    call: ToolCall,
    destructive: bool,
    decision: PolicyDecision,
    approval: ApprovalPolicy,
    remember: Sequence[RememberScope],
    call_id: str | None,
) -> Refusal | None:
    """A remembered decision's verdict on bound `call`, or a person's; None when approved."""
    known = remembered_for(remembered(ctx.ledger), call.name, call.arguments)
    if known is not None:
        verdict = "approved" if known.approved else "rejected"
        ctx.announce(
            f"{call.name} {verdict} without asking: {known.id} ({known.by or 'a person'} "
            f"answered {known.question_id})",
            kind="remembered",
        )
        return None if known.approved else Refusal("NotApproved", not_approved_message(known.why))
    kind = "the destructive tool" if destructive else "the tool"
    shown = plain_json(call.arguments)
    if len(shown) > MAX_ASKED_ARGUMENTS:
        return Refusal("TooLongToAsk", too_long_message(call.name, len(shown)))
    digest = arguments_hash(call.arguments)
    outcome = await ctx.ask_approval(
        thread,
        f"Run {kind} {call.name} with {shown}?",
        approval,
        rule=decision.rule,
        remember=remember,
        tool=call.name,
        arguments_hash=digest,
        arguments=call.arguments if isinstance(call.arguments, dict) else None,
        tool_call_id=call_id,
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


def too_long_message(tool: str, length: int) -> str:
    return (
        f"refused before asking: the arguments of {tool} are {length:,} characters, more "
        f"than the {MAX_ASKED_ARGUMENTS:,} a person is shown whole; call it with shorter "
        "arguments"
    )


def settle_covered(ctx: RecipeContext, rule: RememberedDecision) -> None:
    """Answer, with `rule`'s verdict, every waiting tool question whose call it covers:
    the other calls of the turn `rule` was made in, asked at the same time."""
    covered = [
        q
        for q in ctx.pending_questions()
        if q.tool is not None and rule.covers(q.tool, q.arguments_hash or "")
    ]
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
