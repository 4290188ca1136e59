"""Committed histories replay against today's workflow code: a non-deterministic
change to a workflow fails here, before it can break running workflows."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from temporalio.client import WorkflowHistory
from temporalio.worker import Replayer

from durafact._recipes import RECIPES
from durafact._runtime.plugin import DurafactPlugin
from tests.helpers import ROOT

# The histories of today's shape, and in a folder per patch (`before_<patch>/`) what runs
# recorded before a change that `workflow.patched` guards, until a release folds it into
# a new baseline (CONTRIBUTING.md); they must all replay.
HISTORIES = sorted((ROOT / "tests" / "histories").rglob("*.json"))


def test_histories_are_committed_for_every_workflow() -> None:
    types = set()
    for path in HISTORIES:
        first = json.loads(path.read_text())["events"][0]
        types.add(first["workflowExecutionStartedEventAttributes"]["workflowType"]["name"])
    assert {w.__name__ for w in RECIPES} <= types


@pytest.mark.parametrize(
    "path", HISTORIES, ids=[str(p.relative_to(ROOT / "tests" / "histories")) for p in HISTORIES]
)
async def test_history_replays(path: Path) -> None:
    history = WorkflowHistory.from_json(path.stem, path.read_text())
    # As a worker replays: durafact and workflows shared across runs (the plugin's
    # sandbox setting), not imported again for each run, which took 4 s a history.
    replayer = Replayer(workflows=[], plugins=[DurafactPlugin(env={}, entry_points=False)])
    await replayer.replay_workflow(history)
