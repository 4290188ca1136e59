"""Usage on the command line: `status` and `result` print a run's tokens and cost; a run
nothing priced (no price table) shows no cost, one not every call of which was priced
shows it `unknown` (never 0); and `list` finds runs through the visibility store by
recipe, status and cost."""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path

import pytest
from temporalio.client import Client, WorkflowExecutionStatus
from temporalio.testing import WorkflowEnvironment

from durafact._core.llm import Usage
from durafact._recipes import Goal, PlanExecuteResult, PlanExecuteWorkflow
from durafact._recipes.recipe import TOKENS_ATTRIBUTE
from durafact._runtime.settings import Settings
from durafact._runtime.worker import build_worker
from durafact.testing import Call, ScriptedModel, default_reply
from tests.helpers import (
    OTHER_MODEL_PRICES,
    SCRIPTED_PRICES,
    clean_env,
    scripted_cost,
    starter,
)

GOAL = "Plan a weekend in Kraków"
UNKNOWN = "cost: unknown (not every call was priced by DURAFACT_PRICES)"


@dataclass
class Queues:
    """Two workers of the test's own: one prices the scripted model, one does not."""

    priced: dict[str, str]
    unpriced: dict[str, str]
    priced_queue: str
    unpriced_queue: str


@pytest.fixture
async def queues(
    env: WorkflowEnvironment, client: Client, settings: Settings, model: ScriptedModel
) -> AsyncIterator[Queues]:
    other = settings.model_copy(update={"task_queue": settings.task_queue + "-unpriced"})
    async with (
        build_worker(client, settings, prices=SCRIPTED_PRICES),
        build_worker(client, other, prices=OTHER_MODEL_PRICES),
    ):
        address = env.client.service_client.config.target_host
        yield Queues(
            priced=clean_env(TEMPORAL_ADDRESS=address, DURAFACT_TASK_QUEUE=settings.task_queue),
            unpriced=clean_env(TEMPORAL_ADDRESS=address, DURAFACT_TASK_QUEUE=other.task_queue),
            priced_queue=settings.task_queue,
            unpriced_queue=other.task_queue,
        )


def usage_line(usage: Usage) -> str:
    """The line `status` and `result` print for a priced run, written out here."""
    return (
        f"usage: {usage.total_tokens:,} tokens ({usage.prompt_tokens:,} in, "
        f"{usage.cached_tokens:,} of them cached; {usage.completion_tokens:,} out); "
        f"cost: {usage.cost.normalize():f} USD"
    )


async def test_status_and_result_print_the_runs_tokens_and_cost(
    queues: Queues, client: Client, model: ScriptedModel, tmp_path: Path
) -> None:
    model.cache(lambda call: 2)
    workflow_id = f"plan-usage-{uuid.uuid4().hex[:6]}"

    ran = await starter("plan", GOAL, "--id", workflow_id, env=queues.priced, cwd=tmp_path)

    assert ran.code == 0, ran.err
    handle = client.get_workflow_handle(workflow_id, result_type=PlanExecuteResult)
    usage = (await handle.result()).usage
    assert usage.cached_tokens == 2 * len(model.calls)
    assert usage.cost == scripted_cost(
        usage.prompt_tokens, usage.cached_tokens, usage.completion_tokens
    )
    line = usage_line(usage)
    assert line in ran.out.splitlines()
    status = await starter("status", workflow_id, env=queues.priced, cwd=tmp_path)
    assert status.code == 0, status.err
    assert line in status.out.splitlines()
    result = await starter("result", workflow_id, env=queues.priced, cwd=tmp_path)
    assert result.code == 0, result.err
    assert line in result.out.splitlines()


async def test_a_model_without_a_price_is_shown_as_unknown_never_as_zero(
    queues: Queues, client: Client, tmp_path: Path
) -> None:
    workflow_id = f"plan-unpriced-{uuid.uuid4().hex[:6]}"

    ran = await starter("plan", GOAL, "--id", workflow_id, env=queues.unpriced, cwd=tmp_path)

    assert ran.code == 0, ran.err
    handle = client.get_workflow_handle(workflow_id, result_type=PlanExecuteResult)
    usage = (await handle.result()).usage
    assert usage.cost is None and usage.total_tokens > 0
    printed = [line for line in ran.out.splitlines() if line.startswith("usage: ")]
    assert printed == [
        f"usage: {usage.total_tokens:,} tokens ({usage.prompt_tokens:,} in; "
        f"{usage.completion_tokens:,} out); {UNKNOWN}"
    ]
    status = await starter("status", workflow_id, env=queues.unpriced, cwd=tmp_path)
    assert printed[0] in status.out.splitlines()
    await visible(client, [workflow_id])
    listed = await starter(
        "list", "--recipe", "plan_execute", "--json", env=queues.unpriced, cwd=tmp_path
    )
    row = next(r for r in json.loads(listed.out)["runs"] if r["workflow_id"] == workflow_id)
    assert (row["tokens"], row["cost"]) == (usage.total_tokens, None)
    table = await starter("list", "--recipe", "plan_execute", env=queues.unpriced, cwd=tmp_path)
    (line,) = [line for line in table.out.splitlines() if line.startswith(workflow_id)]
    assert line.split()[4:6] == [f"{usage.total_tokens:,}", "-"]


async def test_a_run_on_a_worker_without_a_price_table_shows_its_tokens_and_no_cost(
    env: WorkflowEnvironment, client: Client, settings: Settings, tmp_path: Path
) -> None:
    bare = settings.model_copy(update={"task_queue": settings.task_queue + "-bare"})
    environ = clean_env(
        TEMPORAL_ADDRESS=env.client.service_client.config.target_host,
        DURAFACT_TASK_QUEUE=bare.task_queue,
    )
    workflow_id = f"plan-bare-{uuid.uuid4().hex[:6]}"
    async with build_worker(client, bare):
        ran = await starter("plan", GOAL, "--id", workflow_id, env=environ, cwd=tmp_path)
        assert ran.code == 0, ran.err
        handle = client.get_workflow_handle(workflow_id, result_type=PlanExecuteResult)
        usage = (await handle.result()).usage
        status = await starter("status", workflow_id, env=environ, cwd=tmp_path)
    await visible(client, [workflow_id])
    table = await starter("list", "--recipe", "plan_execute", env=environ, cwd=tmp_path)

    assert (usage.cost, usage.currency) == (None, "") and usage.total_tokens > 0
    line = (
        f"usage: {usage.total_tokens:,} tokens ({usage.prompt_tokens:,} in; "
        f"{usage.completion_tokens:,} out)"
    )
    for printed in (ran.out, status.out):
        assert [shown for shown in printed.splitlines() if shown.startswith("usage: ")] == [line]
    (row,) = [shown for shown in table.out.splitlines() if shown.startswith(workflow_id)]
    assert row.split()[4:6] == [f"{usage.total_tokens:,}", "-"]


def dear_reply(call: Call) -> str | dict:
    """The goal `Expensive ...` gets long answers; any other the default ones."""
    if "Expensive" in call.text and call.schema_name is None:
        return "word " * 400
    return default_reply(call)


async def visible(client: Client, workflow_ids: list[str]) -> None:
    """Wait until the visibility store shows each run closed, with its usage."""
    query = " OR ".join(f'WorkflowId = "{i}"' for i in workflow_ids)
    for _ in range(200):
        rows = [e async for e in client.list_workflows(query)]
        closed = [
            e
            for e in rows
            if e.status != WorkflowExecutionStatus.RUNNING
            and e.typed_search_attributes.get(TOKENS_ATTRIBUTE)
        ]
        if len(closed) == len(workflow_ids):
            return
        await asyncio.sleep(0.1)
    raise AssertionError(f"visibility never showed {workflow_ids} closed")


async def test_list_over_cost_finds_exactly_the_runs_above_it_through_visibility(
    queues: Queues, client: Client, model: ScriptedModel, tmp_path: Path
) -> None:
    model.reply(dear_reply)
    suffix = uuid.uuid4().hex[:6]
    runs = {
        "cheap": (f"plan-cheap-{suffix}", "Plan a short walk", queues.priced_queue),
        "dear": (f"plan-dear-{suffix}", "Expensive research trip", queues.priced_queue),
        "unknown": (f"plan-unknown-{suffix}", "Expensive unpriced trip", queues.unpriced_queue),
    }
    results = dict(
        zip(
            runs,
            await asyncio.gather(
                *(
                    client.execute_workflow(
                        PlanExecuteWorkflow.run, Goal(text=goal), id=wid, task_queue=queue
                    )
                    for wid, goal, queue in runs.values()
                )
            ),
            strict=True,
        )
    )
    cheap, dear = results["cheap"].usage.cost, results["dear"].usage.cost
    assert cheap is not None and dear is not None and dear > 10 * cheap
    assert results["unknown"].usage.cost is None
    ids = {name: wid for name, (wid, _, _) in runs.items()}
    await visible(client, list(ids.values()))
    line = (cheap + dear) / 2

    async def listed(*args: str) -> list[dict]:
        run = await starter("list", *args, "--json", env=queues.priced, cwd=tmp_path)
        assert run.code == 0, run.err
        return json.loads(run.out)["runs"]

    above = await listed("--over-cost", f"{line:f}")
    assert {r["workflow_id"] for r in above} & set(ids.values()) == {ids["dear"]}
    assert all(r["cost"] > line for r in above)
    (row,) = [r for r in above if r["workflow_id"] == ids["dear"]]
    assert row["tokens"] == results["dear"].usage.total_tokens
    assert Decimal(repr(row["cost"])) == dear  # a Double, exact to its digits here
    assert (row["recipe"], row["status"]) == ("plan_execute", "completed")
    assert row["state"] == "COMPLETED"
    priced = await listed("--over-cost", "0", "--recipe", "PlanExecuteWorkflow")
    assert {r["workflow_id"] for r in priced} & set(ids.values()) == {ids["cheap"], ids["dear"]}

    table = await starter("list", "--over-cost", f"{line:f}", env=queues.priced, cwd=tmp_path)
    lines = table.out.splitlines()
    header = ["WORKFLOW ID", "RECIPE", "STATUS", "STATE", "TOKENS", "COST", "STARTED (UTC)"]
    assert [h.strip() for h in lines[0].split("  ") if h.strip()] == header
    (shown,) = [line for line in lines if line.startswith(ids["dear"])]
    assert shown.split()[1:6] == [
        "plan_execute",
        "completed",
        "COMPLETED",
        f"{results['dear'].usage.total_tokens:,}",
        f"{dear.normalize():f}",
    ]
    first = await starter("list", "--limit", "1", "--json", env=queues.priced, cwd=tmp_path)
    doc = json.loads(first.out)
    assert len(doc["runs"]) == 1 and doc["more"] is True
    none = await starter("list", "--recipe", "no_such_recipe", env=queues.priced, cwd=tmp_path)
    assert (none.code, none.out) == (0, "no runs match\n")


@pytest.mark.parametrize(
    ("args", "error"),
    [
        (["--over-cost", "-1"], "--over-cost '-1': not a number of at least 0 (such as 0.25)"),
        (["--over-cost", "cheap"], "--over-cost 'cheap': not a number of at least 0"),
        (["--over-cost", "nan"], "--over-cost 'nan': not a number of at least 0"),
        (["--recipe", 'x" OR 1=1'], "--recipe 'x\" OR 1=1': letters, digits"),
        (["--status", "a b"], "--status 'a b': letters, digits"),
        (["--limit", "0"], "--limit 0: from 1 to 1000"),
    ],
)
async def test_list_refuses_bad_filters_in_one_line_before_connecting(
    tmp_path: Path, args: list[str], error: str
) -> None:
    env = clean_env(TEMPORAL_ADDRESS="127.0.0.1:1")  # never reached
    run = await starter("list", *args, env=env, cwd=tmp_path)
    assert run.code == 2
    assert len(run.err_lines) == 1 and run.err_lines[0].startswith(f"starter: {error}")


async def test_list_shows_control_and_bidi_characters_of_an_id_as_text_on_its_own_row(
    queues: Queues, client: Client, tmp_path: Path
) -> None:
    workflow_id = f"plan\n\u202eevil-{uuid.uuid4().hex[:6]}\t"
    ran = await starter("plan", GOAL, "--id", workflow_id, env=queues.priced, cwd=tmp_path)
    assert ran.code == 0, ran.err
    await visible_in(
        client, 'DurafactRecipe = "plan_execute" AND ExecutionStatus != "Running"', workflow_id
    )

    table = await starter("list", "--recipe", "plan_execute", env=queues.priced, cwd=tmp_path)

    shown = workflow_id.replace("\n", "\\x0a").replace("\u202e", "\\u202e").replace("\t", "\\x09")
    (line,) = [line for line in table.out.splitlines() if line.startswith(shown)]
    assert line.split()[1:4] == ["plan_execute", "completed", "COMPLETED"]
    assert "\u202e" not in table.out and "\t" not in table.out
    listed = await starter("list", "--json", env=queues.priced, cwd=tmp_path)
    assert workflow_id in [r["workflow_id"] for r in json.loads(listed.out)["runs"]]


async def visible_in(client: Client, query: str, workflow_id: str) -> None:
    """Wait until the visibility store lists the run among those `query` finds (a query
    on its recipe: an id with a newline or a quote cannot go into one)."""
    for _ in range(200):
        if workflow_id in [e.id async for e in client.list_workflows(query)]:
            return
        await asyncio.sleep(0.1)
    raise AssertionError(f"visibility never listed {workflow_id!r} in {query}")


async def test_list_shows_a_running_chats_tokens_and_unknown_cost_as_status_does(
    queues: Queues, client: Client, tmp_path: Path
) -> None:
    chat_id = f"chat-usage-{uuid.uuid4().hex[:6]}"
    sent = await starter("chat", chat_id, "--send", "hello", env=queues.unpriced, cwd=tmp_path)
    assert sent.code == 0, sent.err
    usage = await client.get_workflow_handle(chat_id).query("usage", result_type=Usage)
    assert usage.total_tokens > 0 and usage.cost is None
    await visible_in(client, 'DurafactRecipe = "chat"', chat_id)

    status = await starter("status", chat_id, env=queues.unpriced, cwd=tmp_path)
    listed = await starter("list", "--recipe", "chat", "--json", env=queues.unpriced, cwd=tmp_path)
    table = await starter("list", "--recipe", "chat", env=queues.unpriced, cwd=tmp_path)

    assert f"usage: {usage.total_tokens:,} tokens (" in status.out
    assert UNKNOWN in status.out
    row = next(r for r in json.loads(listed.out)["runs"] if r["workflow_id"] == chat_id)
    assert (row["tokens"], row["cost"]) == (usage.total_tokens, None)
    (line,) = [line for line in table.out.splitlines() if line.startswith(chat_id)]
    assert line.split()[4:6] == [f"{usage.total_tokens:,}", "-"]
