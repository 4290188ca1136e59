"""The ready AnswerFlowWorkflow with a result of counts only, and a batch of n short
questions, for the 3,000-question test and the answer-flow bench: the ready result
carries the whole ledger (about 1.5 KB per item), which at 3,000 items is over
Temporal's payload limit, a matter of result size and not of per-item cost."""

from __future__ import annotations

from pydantic import BaseModel
from temporalio import workflow

from durafact._core.answer_flow import AnswerResult
from durafact._recipes.answer_flow import AnswerBatchInput, AnswerFlowWorkflow, Question
from durafact._recipes.recipe import RecipeContext


class BatchCounts(BaseModel):
    accepted: int
    fallback: int
    blocked: int
    artifacts: int


@workflow.defn
class SizedAnswerFlow(AnswerFlowWorkflow):
    @workflow.run
    async def run(self, batch: AnswerBatchInput) -> BatchCounts:  # type: ignore[override]
        return await self.execute(batch)  # type: ignore[return-value]

    async def finish(  # type: ignore[override]
        self, ctx: RecipeContext, batch: AnswerBatchInput, results: list[AnswerResult]
    ) -> BatchCounts:
        statuses = [r.status for r in results]
        return BatchCounts(
            accepted=statuses.count("accepted"),
            fallback=statuses.count("fallback"),
            blocked=statuses.count("blocked"),
            artifacts=len(ctx.ledger),
        )


def tram_batch(n: int) -> tuple[AnswerBatchInput, dict[str, int], dict[str, int]]:
    """n one-line questions with one repair round, and (ungrounded, review_fails) for
    `tests.scripted_answers.answerer`: a third quote what their source never says and a
    third fail the review until the repair round, so every per-item path runs."""
    ids = [f"q{i}" for i in range(n)]
    batch = AnswerBatchInput(
        questions=[
            Question(
                id=i, question=f"When does tram {i} leave?", source=f"Tram {i} leaves at nine."
            )
            for i in ids
        ],
        max_items=n,
        max_repairs=1,
    )
    return batch, {i: 1 for i in ids[1::3]}, {i: 1 for i in ids[2::3]}
