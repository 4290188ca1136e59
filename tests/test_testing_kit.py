"""durafact.testing answers a run's questions as a person does, in one call each:
`approve`, `reject` (the oldest waiting question, or a named one), and a refusal is
one line that says why."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from temporalio.client import Client

from durafact import ApprovalPolicy
from durafact._runtime.settings import Settings
from durafact._runtime.worker import build_worker
from durafact.testing import approve, reject, waiting_question
from tests.workflows.test_approval import Ask, AskWorkflow, start_ask


@pytest.fixture
async def worker(client: Client, settings: Settings) -> AsyncIterator[Settings]:
    async with build_worker(client, settings, workflows=[AskWorkflow]):
        yield settings


async def test_approve_and_reject_answer_the_waiting_question_and_return_the_outcome(
    client: Client, worker: Settings
) -> None:
    handle = await start_ask(client, worker.task_queue, Ask(attempts=2))
    first = await waiting_question(handle)
    rejected = await reject(handle, reason="not yet")
    assert (rejected.question_id, rejected.approved, rejected.reason) == (
        first.id,
        False,
        "not yet",
    )
    second = await waiting_question(handle)
    assert second.n == 2
    approved = await approve(handle, second.id, reason="fine")
    assert (approved.question_id, approved.approved) == (second.id, True)
    result = await handle.result()
    assert [q.answer.by for q in result.history if q.answer] == ["test", "test"]


async def test_a_refused_answer_is_one_line_saying_why(client: Client, worker: Settings) -> None:
    handle = await start_ask(client, worker.task_queue, Ask(attempts=2, policy=ApprovalPolicy()))
    first = await waiting_question(handle)
    await reject(handle, first)
    with pytest.raises(ValueError) as answered:
        await approve(handle, first)
    assert str(answered.value) == (
        f"decide refused: question {first.id!r} is already answered (rejected)"
    )
    await approve(handle)
    await handle.result()
    with pytest.raises(ValueError) as closed:
        await approve(handle, first)
    assert str(closed.value) == "decide refused: workflow execution already completed"
