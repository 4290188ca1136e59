"""What a model or a hook returns never fails a workflow task forever: a reply whose
tool input nests deeper than the JSON parser goes (a RecursionError inside workflow
code, before) is read as text, and a critique score too large for a float (an
OverflowError, before) fails the run as `InvalidScore`."""

from __future__ import annotations

import asyncio
import uuid

import pytest
from temporalio.client import Client
from temporalio.exceptions import ApplicationError

from durafact._core.tools import parse_arguments
from durafact._recipes.react import ReActInput, ReActWorkflow
from durafact._recipes.reflection import checked_score
from durafact._runtime.settings import Settings
from durafact.testing import Call, ScriptedModel

NESTED = "[" * 100_000


def test_arguments_nested_past_the_parser_are_text() -> None:
    assert parse_arguments(NESTED, unquote=True) == NESTED


@pytest.mark.parametrize("score", [10**400, -(10**400)])
def test_a_score_too_large_for_a_float_is_an_invalid_score(score: int) -> None:
    with pytest.raises(ApplicationError) as refused:
        checked_score(score)
    assert refused.value.type == "InvalidScore" and refused.value.non_retryable


async def test_a_tool_input_nested_past_the_parser_is_an_observation_not_a_stuck_run(
    client: Client, worker: Settings, model: ScriptedModel
) -> None:
    def reply(call: Call) -> str:
        if call.activity_id.endswith(":1"):
            return f"Thought: nest it.\nAction: calculator\nAction Input: {NESTED}\nPAUSE"
        return "Thought: I now know the answer.\nFinal Answer: too deep"

    model.reply(reply)
    handle = await client.start_workflow(
        ReActWorkflow.run,
        ReActInput(question="How deep can brackets go?"),
        id=f"react-nested-{uuid.uuid4().hex[:8]}",
        task_queue=worker.task_queue,
    )
    # Bounded so that a regression fails here instead of hanging the suite.
    result = await asyncio.wait_for(handle.result(), timeout=120)

    assert (result.ending, result.answer) == ("answer", "too deep")
    (call,) = result.tool_calls
    assert call.tool == "calculator"
