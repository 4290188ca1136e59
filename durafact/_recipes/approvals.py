"""A recipe run's questions for a person: `Approvals`, the part of `RecipeContext` that
asks, waits durably and takes answers (see durafact/_recipes/recipe.py for how a recipe uses it).

A question is the artifact `approval:{thread}:{n}` in the run's ledger, and lives only
there: the `answer` signal and the `decide` update apply an answer to its question at
once (`receive_answer`), and the waiting `ask_approval` sees the question closed. While
any question waits, the run's status is AWAITING_APPROVAL.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import timedelta
from typing import Any

from temporalio import workflow

from durafact._core.approval import (
    TIMED_OUT,
    ApprovalAnswer,
    ApprovalKind,
    ApprovalOutcome,
    ApprovalPolicy,
    ApprovalQuestion,
    RememberScope,
    validate_answer,
)
from durafact._core.ids import approval_id, text_key
from durafact._core.ledger import Ledger
from durafact._recipes.spending import BUDGET_THREAD, Spending

# DurafactStatus while any question waits: what `durafact pending` lists.
AWAITING_APPROVAL = "awaiting_approval"


class Approvals:
    """Questions for a person, mixed into `RecipeContext`, whose ledger, status,
    announcements and spending they use."""

    ledger: Ledger
    status: str
    spending: Spending
    announce: Callable[..., None]
    set_status: Callable[..., None]

    async def ask_approval(
        self,
        thread: str,
        text: str,
        policy: ApprovalPolicy | None = None,
        kind: ApprovalKind = "approve",
        settable: Sequence[str] = (),
        rule: str | None = None,
        remember: Sequence[RememberScope] = (),
        tool: str | None = None,
        arguments_hash: str | None = None,
        arguments: dict[str, Any] | None = None,
        tool_call_id: str | None = None,
    ) -> ApprovalOutcome:
        """Ask a person `text` and wait durably for the answer, or for `policy`'s timeout.

        The question is `approval:{thread}:{n}`, n one past the thread's questions so
        far: asking again after a rejection continues the thread's chain. While it
        waits, DurafactStatus is `awaiting_approval`; once answered it is `approved` or
        `rejected` (unless another question asked at the same time still waits). On
        timeout the policy rejects ("timed out"), or escalates to a question of kind
        `escalate` that has its own timeout and then rejects. `settable`: what an
        approval may set (`ApprovalQuestion.settable`); `rule`: which policy rule asks
        (a tool question); `remember`: the scopes an answer may remember; `tool`,
        `arguments_hash`, `arguments` and `tool_call_id`: the call a tool question is
        about, its arguments as the tool will receive them, and its id.

        Example:
            ```python
            outcome = await ctx.ask_approval(
                "release",  # the thread: the question is approval:release:1
                f"Publish {draft.title}?",
                policy=ApprovalPolicy(timeout=timedelta(days=3)),
            )
            if not outcome.approved:
                return Report(text=f"not published: {outcome.reason}")
            ```

            A person answers with `durafact approve RUN`, the console's inbox, the
            HTTP API, or in a test `await durafact.testing.approve(handle)`.
        """
        policy = policy or ApprovalPolicy()
        asking = {
            "settable": list(settable),
            "rule": rule,
            "remember": list(remember),
            "tool": tool,
            "arguments_hash": arguments_hash,
            "arguments": arguments,
            "tool_call_id": tool_call_id,
        }
        question = self._open_question(thread, text, kind, **asking)
        outcome = await self._wait_for_answer(question, policy.timeout)
        if outcome is None and policy.on_timeout == "escalate":
            self.ledger.update(question.id, status="timed_out")
            escalation = self._open_question(thread, text, "escalate", escalates=question, **asking)
            self.announce(
                f"{question.id} timed out; escalated to {escalation.id}", kind="escalation"
            )
            question = escalation
            outcome = await self._wait_for_answer(question, policy.escalation_timeout)
        if outcome is None:
            outcome = self._close(
                question,
                ApprovalAnswer(approved=False, reason=TIMED_OUT, by="timeout"),
                status="timed_out",
            )
        self._settle(outcome)
        return outcome

    def approval_history(self, thread: str) -> list[ApprovalQuestion]:
        """Every question of `thread`, first to last, however each ended."""
        key = text_key(thread)
        return [q for q in self._questions() if text_key(q.thread) == key]

    def pending_questions(self) -> list[ApprovalQuestion]:
        """The questions that wait for an answer, oldest first."""
        return [q for q in self._questions() if q.status == "pending"]

    def receive_answer(self, answer: ApprovalAnswer) -> ApprovalOutcome:
        """Apply a person's answer to its question now; ValueError when it cannot be taken.

        What the `answer` signal and the `decide` update do: the waiting
        `ask_approval` then finds its question closed.
        """
        question = self.check_answer(answer)
        status = "approved" if answer.approved else "rejected"
        return self._close(question, answer, status=status)

    def check_answer(self, answer: ApprovalAnswer) -> ApprovalQuestion:
        """The question `answer` would close, or ValueError: reads state, changes nothing.
        An approval of a budget question must extend the budget it asks about."""
        question = validate_answer(self._questions(), answer)
        if question.thread == BUDGET_THREAD and answer.approved:
            self.spending.check_extension(answer.changes)
        return question

    def _questions(self) -> list[ApprovalQuestion]:
        return [a.data for a in self.ledger.find_all(ApprovalQuestion)]

    def _question(self, question_id: str) -> ApprovalQuestion:
        return self.ledger.get(question_id).typed(ApprovalQuestion).data

    def _open_question(
        self,
        thread: str,
        text: str,
        kind: ApprovalKind,
        escalates: ApprovalQuestion | None = None,
        settable: Sequence[str] = (),
        rule: str | None = None,
        remember: Sequence[RememberScope] = (),
        tool: str | None = None,
        arguments_hash: str | None = None,
        arguments: dict[str, Any] | None = None,
        tool_call_id: str | None = None,
    ) -> ApprovalQuestion:
        n = len(self.approval_history(thread)) + 1
        question = ApprovalQuestion(
            id=approval_id(thread, n),
            thread=thread,
            n=n,
            kind=kind,
            text=text,
            escalates=escalates.id if escalates else None,
            settable=list(settable),
            rule=rule,
            remember=list(remember),
            tool=tool,
            arguments_hash=arguments_hash,
            arguments=arguments,
            tool_call_id=tool_call_id,
        )
        self.ledger.create(question.id, question)
        if escalates:
            self.ledger.link(question.id, "escalates", escalates.id)
        if self.status != AWAITING_APPROVAL:
            self.set_status(AWAITING_APPROVAL, f"awaiting approval of {question.id}")
        self.announce(
            f"{question.id} ({kind}): {text}",
            kind="question",
            data={"question": question.model_dump(mode="json")},
        )
        return question

    async def _wait_for_answer(
        self, question: ApprovalQuestion, timeout: timedelta | None
    ) -> ApprovalOutcome | None:
        """The outcome once the question is closed; None when `timeout` passed first."""

        def closed() -> bool:
            return self._question(question.id).status != "pending"

        try:
            await workflow.wait_condition(
                closed, timeout=timeout, timeout_summary=f"approval timeout: {question.id}"
            )
        except TimeoutError:  # asyncio.TimeoutError is TimeoutError on 3.11
            # An answer that came in the same workflow task as the timer still counts.
            if not closed():
                return None
        return self._outcome(self._question(question.id))

    def _close(
        self, question: ApprovalQuestion, answer: ApprovalAnswer, status: str
    ) -> ApprovalOutcome:
        answer = answer.model_copy(update={"question_id": question.id})
        closed = question.model_copy(update={"status": status, "answer": answer})
        self.ledger.update(question.id, closed)
        return self._outcome(closed)

    @staticmethod
    def _outcome(question: ApprovalQuestion) -> ApprovalOutcome:
        answer = question.answer
        assert answer is not None, f"{question.id} was closed without an answer"
        return ApprovalOutcome(
            question_id=question.id,
            approved=answer.approved,
            reason=answer.reason,
            changes=dict(answer.changes),
            timed_out=question.status == "timed_out",
            remember=answer.remember,
        )

    def _settle(self, outcome: ApprovalOutcome) -> None:
        verdict = "approved" if outcome.approved else "rejected"
        by = self._question(outcome.question_id).answer
        who = f" by {by.by}" if by and by.by and not outcome.timed_out else ""
        reason = f": {outcome.reason}" if outcome.reason else ""
        changed = f" (changes: {', '.join(outcome.changes)})" if outcome.changes else ""
        self.announce(
            f"{outcome.question_id} {verdict}{who}{reason}{changed}",
            kind="approval",
            data={"answer": outcome.model_dump(mode="json")},
        )
        # While another question (asked concurrently) waits, the run stays awaiting.
        if not self.pending_questions():
            self.set_status(verdict)
