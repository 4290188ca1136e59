"""Nothing is stuck silently: a bug in workflow code retries the workflow task (so a
fixed worker can carry the run on), and `status`, `result` and `result --json` say so
within seconds, read from Temporal, not from a query the workflow cannot answer.

The recipe is a user's, in a module of a temporary package registered by `--recipes`:
its lifecycle raises a plain RuntimeError on a value of its input.
"""

from __future__ import annotations

import asyncio
import json
import re
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from temporalio.client import Client
from temporalio.testing import WorkflowEnvironment

from durafact._runtime.settings import Settings
from durafact._runtime.worker import build_worker
from tests.helpers import clean_env, read_until, spawn, starter

SUMS = """
from pydantic import BaseModel
from temporalio import workflow

from durafact._recipes import Recipe, RecipeContext


class Numbers(BaseModel):
    values: list[int]


class Total(BaseModel):
    total: int


@workflow.defn
class Adder(Recipe[Numbers, Total]):
    recipe_name = "adder"

    @workflow.run
    async def run(self, numbers: Numbers) -> Total:
        return await self.execute(numbers)

    async def lifecycle(self, ctx: RecipeContext, numbers: Numbers) -> Total:
        ctx.set_status("adding")
        for value in numbers.values:
            if value < 0:
                raise RuntimeError(f"cannot add the negative value {value}")
        return Total(total=sum(numbers.values))


RECIPES = [Adder]
"""

FAILING = "workflow task failing: RuntimeError: cannot add the negative value -3"


@pytest.fixture
async def adder_env(
    env: WorkflowEnvironment,
    client: Client,
    settings: Settings,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> AsyncIterator[dict[str, str]]:
    """The package `sums` on the path of an in-process worker and of the starter."""
    src = tmp_path / "src"
    (src / "sums").mkdir(parents=True)
    (src / "sums" / "__init__.py").write_text("")
    (src / "sums" / "recipes.py").write_text(SUMS)
    monkeypatch.syspath_prepend(str(src))
    async with build_worker(client, settings, recipes=["sums.recipes"]):
        yield clean_env(
            TEMPORAL_ADDRESS=env.client.service_client.config.target_host,
            DURAFACT_TASK_QUEUE=settings.task_queue,
            DURAFACT_RECIPES="sums.recipes",
            PYTHONPATH=str(src),
        )


async def test_a_failing_workflow_task_is_reported_by_status_and_result_with_type_and_attempt(
    adder_env: dict[str, str], client: Client, tmp_path: Path
) -> None:
    workflow_id = f"adder-{uuid.uuid4().hex[:6]}"
    line = re.compile(re.escape(FAILING) + r" \(attempt (\d+)\)")
    started = await starter(
        "start", "Adder", "--input", json.dumps({"values": [1, -3, 2]}), "--id", workflow_id,
        "--no-wait", env=adder_env, cwd=tmp_path,
    )  # fmt: skip
    assert started.code == 0, started.err
    waiting = await spawn("result", workflow_id, env=adder_env, cwd=tmp_path)
    as_json = await spawn("result", workflow_id, "--json", env=adder_env, cwd=tmp_path)
    assert waiting.stdout is not None and as_json.stderr is not None
    try:
        seen = await read_until(waiting.stdout, FAILING)
        noted = await read_until(as_json.stderr, FAILING)
        status = await starter("status", workflow_id, env=adder_env, cwd=tmp_path)
        # The next attempt fails the same way: a waiting command does not say it again.
        for _ in range(120):
            again = await starter("status", workflow_id, env=adder_env, cwd=tmp_path)
            attempts = [int(n) for n in line.findall(again.out)]
            if attempts and attempts[0] > int(line.findall(status.out)[0]):
                break
            await asyncio.sleep(0.5)
        else:
            raise AssertionError(f"the workflow task was not tried again: {again.out}")
        assert waiting.returncode is None and as_json.returncode is None  # both still wait
    finally:
        for process in (waiting, as_json):
            process.kill()
        out, _ = await waiting.communicate()
        _, err = await as_json.communicate()
        await client.get_workflow_handle(workflow_id).terminate("test cleanup")

    assert line.fullmatch(seen[-1].removeprefix("  ! ")), seen[-1]
    assert re.fullmatch(
        rf"starter: workflow {workflow_id}: {re.escape(FAILING)} \(attempt \d+\)", noted[-1]
    ), noted[-1]
    assert f"workflow {workflow_id}: RUNNING (Adder" in status.out
    assert any(line.fullmatch(one) for one in status.out.splitlines()), status.out
    assert "the run goes on once a worker with fixed code runs it" in status.out
    assert "the workflow answers no query while its task fails" in status.out
    assert "no worker answered" not in status.out
    everything = "\n".join(seen) + out.decode()
    assert everything.count(FAILING) == 1, everything
    assert (err.decode() + "\n".join(noted)).count(FAILING) == 1
