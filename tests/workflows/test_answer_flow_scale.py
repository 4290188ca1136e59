"""A 3,000-question answer batch completes on the dev server: every workflow task stays
far under Temporal's 2-second deadlock detector on an idle machine (a loaded one may
see a task retried; the batch still completes). Before the ledger's indexes, each
`link` compared the new link with every link so far and each `ctx.refs` built a dict
of the whole ledger, so one workflow task ran for minutes and the batch never finished
(the task failed and was retried forever). The recipe is the ready AnswerFlowWorkflow
with a result of counts only (tests/sized_answer_flow.py says why)."""

from __future__ import annotations

import uuid

from temporalio.client import Client

from durafact._runtime.settings import Settings
from durafact._runtime.worker import build_worker
from durafact.testing import ScriptedModel
from tests.scripted_answers import answerer
from tests.sized_answer_flow import SizedAnswerFlow, tram_batch

ITEMS = 3000


async def test_a_3000_question_batch_with_a_repair_round_completes(
    client: Client, settings: Settings, model: ScriptedModel
) -> None:
    batch, ungrounded, review_fails = tram_batch(ITEMS)
    model.reply(answerer(ungrounded, review_fails))
    async with build_worker(client, settings, workflows=[SizedAnswerFlow]):
        handle = await client.start_workflow(
            SizedAnswerFlow.run,
            batch,
            id=f"answers-{ITEMS}-{uuid.uuid4().hex[:8]}",
            task_queue=settings.task_queue,
        )
        counts = await handle.result()

    assert (counts.accepted, counts.fallback, counts.blocked) == (ITEMS, 0, 0)
    # A question, an answer and an outcome per item; a review of each answer that passed
    # the check in round 0; a second answer and its review for each repaired item; and
    # the two system prompts sent twice (the generator's, by generate and repair; the
    # reviewer's), each stored whole once.
    repaired = len(ungrounded) + len(review_fails)
    assert counts.artifacts == 3 * ITEMS + (ITEMS - len(ungrounded)) + 2 * repaired + 2
    assert [c.activity_id for c in model.calls] == [
        "llm:generate:0",
        "llm:review:0",
        "llm:repair:1",
        "llm:review:1",
    ]


async def test_a_round_announcement_names_the_first_twenty_failing_items(
    client: Client, settings: Settings, model: ScriptedModel
) -> None:
    batch, ungrounded, review_fails = tram_batch(45)
    model.reply(answerer(ungrounded, review_fails))
    async with build_worker(client, settings, workflows=[SizedAnswerFlow]):
        handle = await client.start_workflow(
            SizedAnswerFlow.run,
            batch,
            id=f"answers-45-{uuid.uuid4().hex[:8]}",
            task_queue=settings.task_queue,
        )
        await handle.result()
        progress = await handle.query(SizedAnswerFlow.progress, 0)

    (round_zero,) = [e for e in progress.events if e.message.startswith("generate:0: ")]
    first_twenty = ", ".join(f"q{i}" for i in range(30) if i % 3)
    assert round_zero.message.endswith(f"failing: {first_twenty} and 10 more")
