"""QueryRetry: a query whose replay fails with nondeterminism is asked again, so a
worker's race with a run's close does not reach the user, and a history that truly
does not replay still fails. The workflows here replay differently on purpose, keyed
by how often this process ran their code."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from temporalio import workflow
from temporalio.client import Client, WorkflowHandle, WorkflowQueryFailedError
from temporalio.worker import Worker

from durafact._cli.follow import ProgressFeed
from durafact._runtime.plugin import DurafactPlugin
from durafact._runtime.query_retry import DELAYS
from durafact._runtime.settings import Settings

RUNS = {"unsteady": 0, "once": 0}


@workflow.defn(sandboxed=False)
class Unsteady:
    """Its first run sleeps, and no replay does: every replay fails."""

    @workflow.run
    async def run(self) -> None:
        RUNS["unsteady"] += 1
        if RUNS["unsteady"] == 1:
            await workflow.sleep(0.01)

    @workflow.query
    def answer(self) -> str:
        return "never"


@workflow.defn(sandboxed=False)
class StumblesOnce:
    """Only its first replay skips the sleep: the race, as a worker loses it once."""

    @workflow.run
    async def run(self) -> None:
        RUNS["once"] += 1
        if RUNS["once"] != 2:
            await workflow.sleep(0.01)

    @workflow.query
    def answer(self) -> str:
        return "steady"


async def closed_run(client: Client, settings: Settings, run: Any) -> WorkflowHandle[Any, Any]:
    handle = await client.start_workflow(
        run, id=f"replay-{uuid.uuid4().hex[:8]}", task_queue=settings.task_queue
    )
    await handle.result()
    return handle


@pytest.mark.parametrize("asker", ["test server's client", "DurafactPlugin client"])
async def test_a_replay_that_fails_once_is_asked_again_and_answered(
    client: Client, settings: Settings, asker: str
) -> None:
    RUNS["once"] = 0
    async with Worker(client, task_queue=settings.task_queue, workflows=[StumblesOnce]):
        handle = await closed_run(client, settings, StumblesOnce.run)
        if asker == "DurafactPlugin client":  # as the command line's and the API's are
            target = client.service_client.config.target_host
            plugged = await Client.connect(target, plugins=[DurafactPlugin(env={})])
            handle = plugged.get_workflow_handle(handle.id)
        assert await handle.query(StumblesOnce.answer) == "steady"
    assert RUNS["once"] == 3  # the run, the replay that failed, the one that answered


async def test_a_history_that_does_not_replay_fails_the_query_after_every_attempt(
    client: Client, settings: Settings
) -> None:
    RUNS["unsteady"] = 0
    async with Worker(client, task_queue=settings.task_queue, workflows=[Unsteady]):
        handle = await closed_run(client, settings, Unsteady.run)
        with pytest.raises(WorkflowQueryFailedError, match=r"\[TMPRL1100\] Nondeterminism"):
            await handle.query(Unsteady.answer)
    assert RUNS["unsteady"] == 1 + len(DELAYS) + 1  # the run, then a replay per attempt


async def test_a_query_that_fails_otherwise_is_not_asked_again(
    client: Client, settings: Settings
) -> None:
    RUNS["once"] = 10  # every replay sleeps, as the run did
    async with Worker(client, task_queue=settings.task_queue, workflows=[StumblesOnce]):
        handle = await closed_run(client, settings, StumblesOnce.run)
        with pytest.raises(WorkflowQueryFailedError, match="no_such_query"):
            await handle.query("no_such_query")
    assert RUNS["once"] == 12  # the run and one replay


async def test_announcements_left_unread_at_the_end_of_a_run_are_said_so(
    client: Client, settings: Settings, capsys: pytest.CaptureFixture[str]
) -> None:
    # The command line's last progress poll comes after the run closed: an unanswered
    # query there leaves lines out for good, so it says where they are.
    RUNS["once"] = 10
    async with Worker(client, task_queue=settings.task_queue, workflows=[StumblesOnce]):
        handle = await closed_run(client, settings, StumblesOnce.run)  # no `progress` query
        await ProgressFeed(handle).poll(final=True)
    assert capsys.readouterr().out == (
        f"  (the last announcements were not read; they are in durafact status {handle.id})\n"
    )
