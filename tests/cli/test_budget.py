"""The budget on the command line: the options of every command that starts a run, their
bad values refused in one line before anything starts, a run stopped over budget told in
one line by the command that waited, `status` and `result`, and a budget question
approved with a new limit."""

from __future__ import annotations

import json
import re
import uuid
from pathlib import Path

import pytest
from temporalio.client import Client

from durafact._core.budget import Budget
from durafact._recipes import ReActInput
from durafact.testing import Call, ScriptedModel
from tests.helpers import question_waiting, starter

QUESTION = "What is 7 times each number?"


def busy(call: Call) -> str:
    """A ReAct agent that never answers: a new calculation every turn."""
    turn = call.activity_id.rsplit(":", 1)[-1]
    return f"Thought: compute it.\nAction: calculator\nAction Input: {turn} * 7\nPAUSE"


def answers_at(turn: int) -> object:
    def reply(call: Call) -> str:
        if call.activity_id.endswith(f":{turn}"):
            return "Thought: I now know the answer.\nFinal Answer: 42"
        return busy(call)

    return reply


async def executions(client: Client, queue: str) -> list[str]:
    return [w.id async for w in client.list_workflows(f'TaskQueue="{queue}"')]


NOT_SETTINGS = """
from pydantic import BaseModel
from temporalio import workflow

from durafact._recipes import Recipe


class Numbers(BaseModel):
    values: list[int]


@workflow.defn
class Adder(Recipe[Numbers, int]):
    @workflow.run
    async def run(self, numbers: Numbers) -> int:
        return sum(numbers.values)


RECIPES = [Adder]
"""


@pytest.mark.parametrize(
    ("args", "reason"),
    [
        (["react", "q", "--budget-tokens", "0"], "--budget-tokens: '0' is not a whole number"),
        (["plan", "g", "--budget-tokens", "1e4"], "--budget-tokens: '1e4' is not a whole number"),
        (["reflect", "t", "--budget-cost", "-2"], "--budget-cost: '-2' is not an amount above 0"),
        (["research", "q", "--budget-cost", "nan"], "--budget-cost: 'nan' is not an amount"),
        (["route", "r", "--budget-ask"], "--budget-ask needs --budget-tokens or --budget-cost"),
        (
            ["react", "q", "--budget-tokens", "5", "--budget-ask-timeout", "2h"],
            "--budget-ask-timeout goes with --budget-ask",
        ),
        (
            ["react", "q", "--budget-tokens", "5", "--budget-ask", "--budget-ask-timeout", "soon"],
            "--budget-ask-timeout: 'soon' is not a duration",
        ),
        (
            ["start", "ReActWorkflow", "--input", '{"question": "q"}', "--budget-cost", "0"],
            "--budget-cost: '0' is not an amount above 0",
        ),
        (
            [
                "start",
                "ReActWorkflow",
                "--input",
                '{"question": "q", "budget": {"cost": 1}}',
                "--budget-tokens",
                "-1",
            ],
            "--budget-tokens: '-1' is not a whole number",
        ),  # fmt: skip
        (["chat", "--budget-ask"], "--budget-ask needs --budget-tokens or --budget-cost"),
        (["approve", "w", "--set", "tokens=0"], "--set tokens: '0' is not a whole number"),
        (["approve", "w", "--set", "cost=free"], "--set cost: 'free' is not an amount above 0"),
        (
            [
                "start",
                "Adder",
                "--input",
                '{"values": [1]}',
                "--budget-tokens",
                "9",
                "--recipes",
                "sums",
            ],
            "the budget options: Numbers takes no budget (an input takes one when its model "
            "subclasses RecipeSettings)",
        ),  # fmt: skip
    ],
    ids=[
        "zero-tokens",
        "tokens-not-whole",
        "negative-cost",
        "nan-cost",
        "ask-without-a-limit",
        "timeout-without-ask",
        "timeout-not-a-duration",
        "start-zero-cost",
        "start-negative-tokens",
        "chat-ask-without-a-limit",
        "approve-zero-tokens",
        "approve-cost-not-a-number",
        "input-without-settings",
    ],
)
async def test_bad_budget_options_are_one_line_and_start_nothing(
    starter_env: dict[str, str], client: Client, tmp_path: Path, args: list[str], reason: str
) -> None:
    (tmp_path / "sums.py").write_text(NOT_SETTINGS)
    env = starter_env | {"PYTHONPATH": str(tmp_path)}
    run = await starter(*args, env=env, cwd=tmp_path)
    assert run.code == 2, run.out
    assert len(run.err_lines) == 1 and run.err_lines[0].startswith(f"starter: {reason}"), run.err
    assert await executions(client, starter_env["DURAFACT_TASK_QUEUE"]) == []


async def test_a_loop_stopped_by_its_budget_is_one_line_in_every_command_that_shows_it(
    starter_env: dict[str, str], model: ScriptedModel, tmp_path: Path
) -> None:
    model.reply(busy)
    workflow_id = f"react-{uuid.uuid4().hex[:6]}"
    run = await starter(
        "react", QUESTION, "--max-turns", "30", "--budget-tokens", "900", "--id", workflow_id,
        env=starter_env, cwd=tmp_path,
    )  # fmt: skip

    assert run.code == 1
    stopped = re.compile(
        rf"starter: workflow {workflow_id} stopped over budget: spent ([0-9,]+) of 900 tokens; "
        rf"what it made: durafact artifacts {workflow_id}"
    )
    assert len(run.err_lines) == 1 and stopped.fullmatch(run.err_lines[0]), run.err
    assert "  [over_budget] over budget: spent " in run.out
    spent = stopped.fullmatch(run.err_lines[0])[1]  # type: ignore[index]
    assert int(spent.replace(",", "")) >= 900

    result = await starter("result", workflow_id, env=starter_env, cwd=tmp_path)
    assert (result.code, result.err_lines) == (1, run.err_lines)
    status = await starter("status", workflow_id, env=starter_env, cwd=tmp_path)
    assert status.code == 0, status.err
    lines = status.out.splitlines()
    assert "recipe status: over_budget" in lines
    assert f"over budget: spent {spent} of 900 tokens" in lines
    assert f"what it made: durafact artifacts {workflow_id}" in lines
    assert not [line for line in lines if line.startswith("resume:")]  # it would stop again


async def test_approve_with_a_new_limit_lets_the_run_finish(
    starter_env: dict[str, str], client: Client, model: ScriptedModel, tmp_path: Path
) -> None:
    model.reply(answers_at(6))
    workflow_id = f"react-{uuid.uuid4().hex[:6]}"
    # The option sets the tokens over the input's own budget, which asks.
    given = {"question": QUESTION, "max_turns": 30, "budget": {"tokens": 99, "on_exhausted": "ask"}}
    started = await starter(
        "start", "ReActWorkflow", "--input", json.dumps(given), "--budget-tokens", "900",
        "--id", workflow_id, "--no-wait", env=starter_env, cwd=tmp_path,
    )  # fmt: skip
    assert started.code == 0, started.err
    handle = client.get_workflow_handle(workflow_id)
    question = await question_waiting(handle)
    assert question.text.endswith(" of 900 tokens; extend by 900 tokens?")

    pending = await starter("pending", env=starter_env, cwd=tmp_path)
    assert f"{workflow_id}  approval:budget:1  approve" in pending.out.splitlines()
    too_low = await starter(
        "approve", workflow_id, "--set", "tokens=10", env=starter_env, cwd=tmp_path
    )
    assert too_low.code == 1
    assert too_low.err_lines[0].startswith(
        "starter: decide refused: InvalidAnswer: tokens=10 leaves nothing for the next call"
    )
    approved = await starter(
        "approve", workflow_id, "--set", "tokens=50000", env=starter_env, cwd=tmp_path
    )
    assert approved.code == 0, approved.err
    assert approved.out.splitlines()[0] == (
        f"approved approval:budget:1 of workflow {workflow_id} with tokens=50000"
    )
    result = await starter("result", workflow_id, env=starter_env, cwd=tmp_path)
    assert result.code == 0, result.err
    assert result.out.splitlines()[result.out.splitlines().index("answer:") + 1] == "  42"
    started_with = (await handle.fetch_history()).events[0]
    payload = started_with.workflow_execution_started_event_attributes.input.payloads[0]
    [sent] = await client.data_converter.decode([payload], [ReActInput])
    assert sent.budget == Budget(tokens=900, on_exhausted="ask")
