"""Committed histories replay against today's workflow code: a non-deterministic
change to a workflow fails here, before it can break running workflows."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator

from temporalio.client import WorkflowHistory
from temporalio.worker import Replayer

from durafact.runtime.codec import data_converter
from tests.helpers import ROOT
from workflows import RECIPES

# Each folder below tests/histories/ keeps what runs of an earlier shape recorded (e.g.
# before_status_by_phase/: before the patch STATUS_BY_PHASE; before_baseline/: before
# BASELINE, with a marker per patch and list_tools an activity); they must all replay.
HISTORIES = sorted((ROOT / "tests" / "histories").rglob("*.json"))


def test_histories_are_committed_for_every_workflow() -> None:
    types = set()
    for path in HISTORIES:
        first = json.loads(path.read_text())["events"][0]
        types.add(first["workflowExecutionStartedEventAttributes"]["workflowType"]["name"])
    assert {w.__name__ for w in RECIPES} <= types


async def test_every_committed_history_replays() -> None:
    # One replayer run for them all: each run of its own would check every workflow
    # class in the sandbox again (about 4 s a history, 5 minutes of the suite's time).
    async def histories() -> AsyncIterator[WorkflowHistory]:
        for path in HISTORIES:
            yield WorkflowHistory.from_json(path.stem, path.read_text())

    replayer = Replayer(workflows=RECIPES, data_converter=data_converter())
    failures, replayed = [], 0
    async with replayer.workflow_replay_iterator(histories()) as results:
        async for result in results:  # in the order given
            path = HISTORIES[replayed]
            replayed += 1
            if result.replay_failure is not None:
                failures.append(f"{path.relative_to(ROOT)}: {result.replay_failure}")
    assert replayed == len(HISTORIES)
    assert not failures, "\n".join(failures)
