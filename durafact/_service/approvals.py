"""What waits for a person, and answering it: `waiting` (every run whose DurafactStatus
is `awaiting_approval`, found through visibility, so after any restart), `approve` (the
oldest pending question of a run), `decide` (a named one, with the outcome).

An answer goes by the signal `answer` (fire and forget), or by the update `decide`,
whose validator refuses an unknown, answered or malformed answer before anything is
written to history: `Refused` with its reason (`AlreadyAnswered` when the question was
settled first). A correction with a rejection may name only the facts the recipe
declares correctable (`Recipe.correctable`); an approval of a budget question may set
its new limits.
"""

from __future__ import annotations

import asyncio
import re
from dataclasses import dataclass
from typing import Any

from temporalio.client import WorkflowUpdateFailedError
from temporalio.service import RPCError, RPCStatusCode

from durafact._core.approval import ApprovalAnswer, ApprovalOutcome, ApprovalQuestion
from durafact._runtime.codec import PayloadDecryptError
from durafact._runtime.registry import Registry
from durafact._service.errors import (
    AlreadyAnswered,
    Invalid,
    Refused,
    Unanswered,
    failure_text,
)
from durafact._service.runs import (
    AWAITING_APPROVAL,
    STATUS_ATTRIBUTE,
    pending_questions,
    running,
    unanswered,
)

# How a refusal of the `decide` update says the question was settled before it came
# (durafact/_core/approval.py: "question 'x' is already answered (approved)").
SETTLED = re.compile(r"question .* is already \w+")


async def waiting(
    client: Any, where: str = ""
) -> list[tuple[Any, list[ApprovalQuestion], str | None]]:
    """Every running workflow whose DurafactStatus is awaiting_approval (`where` narrows
    the visibility query), with its pending questions, or why they could not be read."""
    query = f'{STATUS_ATTRIBUTE.name}="{AWAITING_APPROVAL}" AND ExecutionStatus="Running"'
    executions = [e async for e in client.list_workflows(f"{query} {where}".strip())]

    async def questions_of(execution: Any) -> tuple[list[ApprovalQuestion], str | None]:
        handle = client.get_workflow_handle(execution.id, run_id=execution.run_id)
        try:
            return await pending_questions(handle), None
        except Exception as exc:
            return [], unanswered("pending_questions", exc)

    answers = await asyncio.gather(*(questions_of(e) for e in executions))
    # Answered since the visibility store saw them: nothing waits any more.
    return [(e, qs, err) for e, (qs, err) in zip(executions, answers, strict=True) if qs or err]


def check_changes(
    registry: Registry, workflow_type: str, changes: dict[str, str], where: str = "--set"
) -> None:
    """Invalid when a correction names what is not a fact the recipe declares
    correctable (a recipe that declares none, or is not registered here, is not checked)."""
    recipe = registry.get(workflow_type)
    facts = recipe.correctable if recipe is not None else ()
    unknown = sorted(set(changes) - set(facts)) if facts else []
    if unknown:
        raise Invalid(
            f"{where} {unknown[0]}: not a fact of {workflow_type} (facts: {', '.join(facts)})"
        )


@dataclass(frozen=True)
class Answered:
    """What `approve` did: the question it answered, how, and by which message."""

    question_id: str
    approved: bool
    by_signal: bool
    """Sent by the signal `answer` (fire and forget), not the update `decide`."""
    limits: bool = False
    """The changes were a budget question's new limits."""


async def approve(
    client: Any,
    registry: Registry,
    workflow_id: str,
    answer: ApprovalAnswer,
) -> Answered:
    """Answer the run's oldest pending question (`answer.question_id` is not used), after
    checking that something waits. An answer to remember goes by the update, which says
    when a question cannot remember it. Changes with an approval are the new limits of a
    budget question, whichever is oldest."""
    handle = client.get_workflow_handle(workflow_id)
    description = await running(handle)
    try:
        questions = await pending_questions(handle)
    except Exception as exc:
        raise unread(workflow_id, exc) from None
    if not questions:
        raise Refused(f"workflow {workflow_id} has no pending question")
    question = questions[0]
    if answer.changes and answer.approved:
        budget = next((q for q in questions if q.settable), question)
        if not budget.settable:
            raise Invalid(f"{budget.id} is not a budget question: --set goes with --reject there")
        # By the update: a limit the run cannot take (below what it spent) is refused
        # here, not dropped by the run. A budget question remembers nothing: it refuses
        # `remember` too.
        outcome = await send_decision(handle, answer.model_copy(update={"question_id": budget.id}))
        return Answered(outcome.question_id, True, by_signal=False, limits=True)
    check_changes(registry, description.workflow_type, answer.changes)
    answer = answer.model_copy(update={"question_id": question.id})
    if answer.remember is None:
        await handle.signal("answer", answer)
        return Answered(question.id, answer.approved, by_signal=True)
    await send_decision(handle, answer)
    return Answered(question.id, answer.approved, by_signal=False)


async def decide(
    client: Any, registry: Registry, workflow_id: str, answer: ApprovalAnswer
) -> ApprovalOutcome:
    """Answer the named question by the update `decide`: its outcome. A rejection's
    changes are corrections (checked against the recipe's facts); an approval's are a
    budget question's limits, which the run checks."""
    handle = client.get_workflow_handle(workflow_id)
    description = await running(handle)
    if not answer.approved:
        check_changes(registry, description.workflow_type, answer.changes, where="changes:")
    return await send_decision(handle, answer)


async def numbered(handle: Any, workflow_id: str, n: int) -> str:
    """The id of the pending question that is number `n` of its thread; Refused when
    none is, or when questions of several threads are."""
    try:
        matching = [q.id for q in await pending_questions(handle) if q.n == n]
    except (RPCError, PayloadDecryptError) as exc:
        raise unread(workflow_id, exc) from None
    if len(matching) == 1:
        return matching[0]
    if not matching:
        raise Refused(f"workflow {workflow_id}: no pending question is number {n} of its thread")
    raise Refused(
        f"workflow {workflow_id}: question {n} of several threads waits "
        f"({', '.join(matching)}): name it by its id"
    )


def unread(workflow_id: str, exc: Exception) -> Unanswered:
    """Why the run's pending questions could not be read."""
    return Unanswered(f"workflow {workflow_id}: {unanswered('pending_questions', exc)}")


async def send_decision(handle: Any, answer: ApprovalAnswer) -> ApprovalOutcome:
    """The `decide` update's outcome; Refused with the workflow's reason when it refuses,
    or, when the run closed while the answer was on its way (another answer to the same
    question was taken first, and the run ended), NotRunning as for a closed run:
    Temporal's NOT_FOUND would say that the run does not exist."""
    try:
        return await handle.execute_update("decide", answer, result_type=ApprovalOutcome)
    except WorkflowUpdateFailedError as exc:
        reason = failure_text(exc)
        settled = SETTLED.search(reason)
        raise (AlreadyAnswered if settled else Refused)(f"decide refused: {reason}") from None
    except RPCError as exc:
        if exc.status == RPCStatusCode.NOT_FOUND:
            await running(handle)  # NotRunning: "workflow ID is COMPLETED: nothing waits ..."
        raise
