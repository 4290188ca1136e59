"""`starter.py artifacts ID`: the whole ledger of a run, the texts a result only names;
and the recipe commands' output, which prints those texts from the same ledger.

The starter runs as a subprocess against the session dev server; a worker in this
process runs the workflows (and answers the query), except where a test stops it.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from pathlib import Path

from temporalio.client import Client

from durafact._core.answer_flow import AnswerResult
from durafact._core.ledger import Ledger
from durafact._recipes import (
    Goal,
    PlanExecuteResult,
    PlanExecuteWorkflow,
    PlanStep,
    ReActInput,
    ReActWorkflow,
    StepResult,
)
from durafact._recipes.answer_flow import NOT_ENOUGH_INFORMATION
from durafact._recipes.plan_execute import GOAL_SYSTEM
from durafact._recipes.react_long import EarlierRun
from durafact._runtime.settings import Settings
from durafact._runtime.worker import build_worker
from durafact.testing import Call, ScriptedModel
from tests.helpers import ROOT, clean_env, ledger_of, starter
from tests.scripted_answers import answerer

GOAL = "Plan a weekend in Kraków"


def env_for(client: Client, settings: Settings) -> dict[str, str]:
    return clean_env(
        TEMPORAL_ADDRESS=client.service_client.config.target_host,
        DURAFACT_TASK_QUEUE=settings.task_queue,
    )


async def plan(client: Client, settings: Settings) -> tuple[str, PlanExecuteResult]:
    workflow_id = f"plan-{uuid.uuid4().hex[:8]}"
    result = await client.execute_workflow(
        PlanExecuteWorkflow.run,
        Goal(text=GOAL),
        id=workflow_id,
        task_queue=settings.task_queue,
    )
    return workflow_id, result


async def test_artifacts_prints_every_text_of_a_closed_run_one_block_each(
    client: Client, worker: Settings, tmp_path: Path
) -> None:
    workflow_id, result = await plan(client, worker)
    ledger = await ledger_of(client.get_workflow_handle(workflow_id))

    run = await starter("artifacts", workflow_id, env=env_for(client, worker), cwd=tmp_path)

    assert run.code == 0, run.err
    blocks = run.out.split("\n\n")
    assert blocks[0] == (
        f"workflow {workflow_id} (PlanExecuteWorkflow): COMPLETED; "
        f"{len(ledger)} artifacts, {len(ledger.links)} links"
    )
    by_id = {block.splitlines()[0]: block.splitlines()[1:] for block in blocks[1:]}
    # The goal, the steps, their results, the final answer, and the system prompt, which
    # every call sends (stored whole once, with the planning call's).
    assert len(by_id) == len(ledger) == 2 * len(result.steps) + 3
    prompt = next(a for a in ledger.artifacts.values() if a.type == "Prompt")
    assert by_id[f"{prompt.id} (Prompt, version 1)"] == [
        f"  text:  {GOAL_SYSTEM.split(chr(10))[0]}",
        "         ",  # the blank line inside the text keeps the block whole
        f"         Goal: {GOAL}",
    ]
    first = result.results[0]
    text = ledger.resolve(first, StepResult).text
    assert by_id[f"{first.id} (StepResult, version 1)"] == [
        f"  text:  {text}",
        f"  links: executes -> {result.steps[0].id}",
    ]
    final = by_id[f"{result.final.id} (FinalAnswer, version 1)"]
    assert final[0] == f"  text:  {result.answer.text}"
    assert final[1:] == [
        f"  links: supported_by -> {result.results[0].id}",
        *(f"         supported_by -> {ref.id}" for ref in result.results[1:]),
    ]
    assert by_id[f"goal:{GOAL} (Goal, version 1)"] == [f"  text:  {GOAL}"]


async def test_artifacts_json_is_the_ledger_the_result_refers_to(
    client: Client, worker: Settings, tmp_path: Path
) -> None:
    workflow_id, result = await plan(client, worker)

    run = await starter(
        "artifacts", workflow_id, "--json", env=env_for(client, worker), cwd=tmp_path
    )

    assert run.code == 0, run.err
    document = json.loads(run.out)
    assert document["workflow_id"] == workflow_id
    assert (document["workflow_type"], document["status"]) == ("PlanExecuteWorkflow", "COMPLETED")
    ledger = Ledger.model_validate(document["ledger"])
    steps = [ledger.resolve(ref, PlanStep).description for ref in result.steps]
    assert steps == ["Gather facts", "Compare options", "Decide"]
    assert ledger.provenance(result.final.id).children[0].id == result.results[0].id


async def test_artifacts_of_a_running_run_show_what_it_has_made_so_far(
    client: Client, worker: Settings, model: ScriptedModel, tmp_path: Path
) -> None:
    def second_step(call: Call) -> bool:
        return call.activity_id == f"llm:step:{GOAL}:1"

    release = model.hold(second_step)
    handle = await client.start_workflow(
        PlanExecuteWorkflow.run,
        Goal(text=GOAL),
        id=f"plan-{uuid.uuid4().hex[:8]}",
        task_queue=worker.task_queue,
    )
    try:
        await asyncio.to_thread(model.wait_for, second_step)
        run = await starter("artifacts", handle.id, env=env_for(client, worker), cwd=tmp_path)
    finally:
        release.set()
    await handle.result()

    assert run.code == 0, run.err
    assert run.out.startswith(f"workflow {handle.id} (PlanExecuteWorkflow): RUNNING; ")
    assert f"\nresult:step:{GOAL}:0 (StepResult, version 1)\n" in run.out
    assert f"result:step:{GOAL}:1" not in run.out


async def test_without_a_worker_the_result_still_prints_and_artifacts_says_why_not(
    client: Client, settings: Settings, tmp_path: Path
) -> None:
    async with build_worker(client, settings):
        workflow_id, result = await plan(client, settings)
    env = env_for(client, settings)

    # Both wait out the artifacts query's deadline (no worker answers it): side by side.
    shown, missing = await asyncio.gather(
        starter("result", workflow_id, env=env, cwd=tmp_path),
        starter("artifacts", workflow_id, env=env, cwd=tmp_path),
    )
    assert shown.code == 0, shown.err
    lines = shown.out.splitlines()
    assert lines[lines.index("answer:") + 1] == f"  {result.answer.text}"
    assert "steps: 3 (their texts: see artifacts)" in lines
    assert (
        "artifacts: not shown (no worker answered the artifacts query); later: "
        f"durafact artifacts {workflow_id}"
    ) in lines
    assert missing.code == 1
    [line] = missing.err_lines
    assert line.startswith(f"starter: workflow {workflow_id}: no worker answered the artifacts")
    assert line.endswith("; is a worker running? durafact up")


async def test_artifacts_of_an_unknown_workflow_is_one_line(
    client: Client, worker: Settings, tmp_path: Path
) -> None:
    run = await starter("artifacts", "no-such-run", env=env_for(client, worker), cwd=tmp_path)
    assert (run.code, run.out) == (1, "")
    assert run.err_lines == ["starter: no workflow with id 'no-such-run'"]


async def test_answer_prints_each_quote_from_the_ledger_the_result_names(
    client: Client, worker: Settings, model: ScriptedModel, tmp_path: Path
) -> None:
    model.reply(answerer())
    env = env_for(client, worker)
    batch = str(ROOT / "examples" / "questions.json")
    workflow_id = f"answer-{uuid.uuid4().hex[:8]}"

    run = await starter("answer", batch, "--id", workflow_id, env=env, cwd=tmp_path)
    shown = await starter("artifacts", workflow_id, "--json", env=env, cwd=tmp_path)

    assert run.code == 0 and shown.code == 0, run.err + shown.err
    ledger = Ledger.model_validate(json.loads(shown.out)["ledger"])
    lines = run.out.splitlines()
    for item in ("retries", "history"):
        at = lines.index(f"{item}: accepted after 1 round(s)")
        accepted = ledger.get(f"outcome:{item}").typed(AnswerResult).data.value
        assert lines[at + 1 : at + 3] == [
            f"  answer: {accepted['answer']}",
            f"  quote:  {accepted['quote']}",
        ]
    at = lines.index("pricing: fallback after 0 round(s)")
    assert lines[at + 1] == f"  answer: {NOT_ENOUGH_INFORMATION}"
    assert "2 accepted, 1 fallback, 0 blocked" in lines


async def test_artifacts_of_a_loop_that_continued_as_new_names_and_shows_each_run(
    client: Client, worker: Settings, model: ScriptedModel, tmp_path: Path
) -> None:
    q = "Multiply step by step"

    def reply(call: Call) -> str:
        turn = int(call.activity_id.rsplit(":", 1)[-1])
        if turn <= 12:
            return (
                f"Thought: multiply.\nAction: calculator\n"
                f'Action Input: {{"expression": "{turn} * 3"}}'
            )
        return "Final Answer: done"

    model.reply(reply)
    handle = await client.start_workflow(
        ReActWorkflow.run,
        ReActInput(question=q, max_turns=20, continue_after_events=100),
        id=f"react-{uuid.uuid4().hex[:8]}",
        task_queue=worker.task_queue,
    )
    first_run = handle.result_run_id
    await handle.result()
    earlier = [a.data for a in (await ledger_of(handle)).find_all(EarlierRun)]
    assert earlier and earlier[0].run_id == first_run
    first = earlier[0]

    run = await starter("artifacts", handle.id, env=env_for(client, worker), cwd=tmp_path)
    assert run.code == 0, run.err
    lines = run.out.splitlines()
    assert lines[1] == (
        f"earlier run {first_run} (turns 1 to {first.last_turn}, {first.last_turn} "
        f"observations): durafact artifacts {handle.id} --run {first_run}"
    )
    assert f"obs:{q}:1:0 (Observation" not in run.out  # in the first run's ledger

    old = await starter(
        "artifacts", handle.id, "--run", str(first_run), env=env_for(client, worker), cwd=tmp_path
    )
    assert old.code == 0, old.err
    assert old.out.startswith(f"workflow {handle.id} (ReActWorkflow): CONTINUED_AS_NEW; ")
    assert f"obs:{q}:1:0 (Observation, version 1)\n  text:  3" in old.out
