"""Approvals: what waits for a person, and the `decide` update that answers it.

The inbox is the runs whose DurafactStatus is `awaiting_approval`, found through
visibility (so they are found after any restart), each asked for its questions
(durafact/_service/approvals.py, as `durafact pending`). An answer goes through the
`decide` update: the workflow's validator refuses an unknown, answered or malformed one
before anything is written to history, and that refusal is a 409 with its reason.
"""

from __future__ import annotations

import asyncio
from typing import Annotated

from fastapi import APIRouter, Depends

from durafact._api.models import Approvals, Decision, Waiting
from durafact._api.services import Services, services
from durafact._core.approval import ApprovalAnswer, ApprovalOutcome
from durafact._service import approvals as answering

router = APIRouter(tags=["approvals"])


@router.get("/approvals", response_model=Approvals, summary="Every pending question")
async def approvals(s: Annotated[Services, Depends(services)]) -> Approvals:
    """Every question that waits for a person, in every run of the namespace (on every
    task queue, as `durafact pending` lists them), with the run it belongs to: its type,
    summary, the facts a rejection may correct. A question of kind `escalate` was asked
    because the one it `escalates` timed out."""
    rows = await answering.waiting(s.client)
    descriptions = await asyncio.gather(
        *(s.client.get_workflow_handle(e.id, run_id=e.run_id).describe() for e, _, _ in rows)
    )
    summaries = await asyncio.gather(*(d.static_summary() for d in descriptions))
    return Approvals(
        runs=[
            Waiting(
                id=execution.id,
                run_id=execution.run_id,
                type=execution.workflow_type,
                summary=summary,
                started_at=execution.start_time,
                questions=questions,
                correctable=s.correctable(execution.workflow_type),
                error=error,
            )
            for (execution, questions, error), summary in zip(rows, summaries, strict=True)
        ]
    )


@router.post(
    "/runs/{workflow_id:path}/approvals/{question_id:path}",
    response_model=ApprovalOutcome,
    summary="Approve or reject a question (the decide update)",
    responses={409: {"description": "the workflow refused the answer, or nothing waits"}},
)
async def decide(
    workflow_id: str,
    question_id: str,
    decision: Decision,
    s: Annotated[Services, Depends(services)],
) -> ApprovalOutcome:
    """The outcome, once the workflow took the answer. `changes` (corrected facts, as the
    command line's `--set`) go with a rejection: the run rebuilds from them and asks
    again in the same thread. With an approval of a budget question (its `settable`),
    they are its new limits: `{"tokens": "80000"}`. `remember` (a tool question's
    `remember` scopes) lets the answer decide later calls without asking."""
    answer = ApprovalAnswer(
        question_id=question_id,
        approved=decision.approved,
        reason=decision.reason,
        changes=decision.changes,
        by=decision.by or "http api",
        remember=decision.remember,
    )
    return await answering.decide(s.client, s.registry, workflow_id, answer)
