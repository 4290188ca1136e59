"""A finished run forked from an edited artifact (durafact/_service/forks.py), on a real dev
server with the scripted model: the fork keeps what was made upstream of the edit (no
model call), reruns what depends on it, and its ledger says where it came from."""

from __future__ import annotations

import re
import uuid
from pathlib import Path
from typing import Any

import pytest
from temporalio.client import Client

from durafact._core.forks import FORK_ID, FORKED_FROM, ForkOrigin
from durafact._core.ids import text_key
from durafact._core.ledger import Ledger
from durafact._recipes import (
    Goal,
    PlanExecuteWorkflow,
    ReflectionInput,
    ReflectionWorkflow,
    ResearchInput,
    ResearchWorkflow,
)
from durafact._runtime.registry import Registry, load_registry
from durafact._runtime.settings import Settings
from durafact._service.errors import Invalid, NotRunning, Refused
from durafact._service.forks import FORKED_FROM_MEMO, fork_run
from durafact.testing import Call, ScriptedModel
from tests.helpers import ledger_of, run_to_ledger, scheduled_activities
from tests.scripted_research import SUM_QUESTION, sample_sources, sum_script

GOAL = "Plan a weekend in Kraków"
STEP = f"step:{GOAL}:1"
RESULT = f"result:step:{GOAL}:1"


def planner(call: Call) -> str | dict:
    """Three steps; a step's result names it; the final answer lists what it was shown."""
    if call.schema_name == "Plan":
        return {"steps": ["Pick dates", "Book a hotel", "List sights"]}
    last = call.last_user.splitlines()[-1]
    if last == "Write the final answer.":
        return "from: " + " / ".join(re.findall(r"\[result:[^\]]+\] (.+)", call.text))
    return f"result of <{last}>"


@pytest.fixture
def registry() -> Registry:
    return load_registry(entry_points=False)


async def planned(
    client: Client, worker: Settings, model: ScriptedModel
) -> tuple[str, Any, Ledger]:
    model.reply(planner)
    workflow_id = f"plan-{uuid.uuid4().hex[:8]}"
    result, ledger = await run_to_ledger(
        client,
        PlanExecuteWorkflow.run,
        Goal(text=GOAL),
        task_queue=worker.task_queue,
        id=workflow_id,
    )
    return workflow_id, result, ledger


async def forked(
    client: Client, worker: Settings, registry: Registry, workflow_id: str, edits: dict[str, Any],
    removed: tuple[str, ...] = (),
) -> tuple[str, Any, Ledger]:  # fmt: skip
    fork = await fork_run(client, worker, registry, workflow_id, edits, removed)
    handle = client.get_workflow_handle(
        fork.workflow_id,
        result_type=registry.get(fork.started.description.workflow_type).result_type,
    )
    return fork.workflow_id, await handle.result(), await ledger_of(handle)


async def test_a_plan_forked_at_step_2s_result_reruns_only_step_3_and_the_answer(
    client: Client, worker: Settings, model: ScriptedModel, registry: Registry
) -> None:
    workflow_id, old, old_ledger = await planned(client, worker, model)
    full = len(model.calls)
    fork_id, new, ledger = await forked(
        client, worker, registry, workflow_id, {RESULT: "Hotel Wawel, booked for two nights"}
    )

    calls = model.calls[full:]
    assert full == 5  # the plan, three steps, the final answer
    assert [c.activity_id for c in calls] == [f"llm:step:{GOAL}:2", f"llm:final:{GOAL}"]
    assert all(c.workflow_id == fork_id for c in calls)
    # Step 3 saw the edited result, and the answer rests on it.
    assert "Hotel Wawel, booked for two nights" in calls[0].text
    assert "result of <Step 2: Book a hotel>" not in calls[0].text
    assert new.answer.text != old.answer.text
    assert "Hotel Wawel, booked for two nights" in new.answer.text
    # What was upstream is the old run's: the same ids, texts and versions.
    for artifact_id in (f"step:{GOAL}:0", STEP, f"step:{GOAL}:2", f"result:step:{GOAL}:0"):
        assert ledger.get(artifact_id) == old_ledger.get(artifact_id)
    assert ledger.get(RESULT).version == 2
    assert ledger.get(RESULT).data["text"] == "Hotel Wawel, booked for two nights"
    # The ledger says where the fork comes from.
    origin = ledger.get(FORK_ID).typed(ForkOrigin).data
    assert (origin.workflow_id, origin.edited, origin.rerun_from) == (
        workflow_id, [RESULT], f"step:{GOAL}:2"
    )  # fmt: skip
    assert origin.run_id == (await client.get_workflow_handle(workflow_id).describe()).run_id
    assert [(link.relation, link.target) for link in ledger.links_from(RESULT)] == [
        ("executes", STEP),
        (FORKED_FROM, FORK_ID),
    ]
    description = await client.get_workflow_handle(fork_id).describe()
    memo = await description.memo_value(FORKED_FROM_MEMO)
    assert memo == {"workflow_id": workflow_id, "run_id": origin.run_id}
    # No activity of the fork asks for the kept stages.
    activities = await scheduled_activities(client, client.get_workflow_handle(fork_id))
    assert [a.activity_id for a in activities] == [c.activity_id for c in calls]


async def test_a_plan_forked_at_step_2_itself_reruns_step_2s_execution_onward(
    client: Client, worker: Settings, model: ScriptedModel, registry: Registry
) -> None:
    workflow_id, _, old_ledger = await planned(client, worker, model)
    full = len(model.calls)
    _, new, ledger = await forked(
        client, worker, registry, workflow_id, {STEP: "Book a hostel near the Old Town"}
    )

    calls = model.calls[full:]
    assert [c.activity_id for c in calls] == [
        f"llm:step:{GOAL}:1",
        f"llm:step:{GOAL}:2",
        f"llm:final:{GOAL}",
    ]
    assert "Step 2: Book a hostel near the Old Town" in calls[0].text
    assert ledger.get(RESULT).data["text"] == "result of <Step 2: Book a hostel near the Old Town>"
    assert ledger.get(f"result:step:{GOAL}:0") == old_ledger.get(f"result:step:{GOAL}:0")
    assert "Book a hostel near the Old Town" in new.answer.text
    assert ledger.get(STEP).version == 2


async def test_a_research_run_with_one_quote_removed_restates_only_the_claims_and_answer(
    client: Client, worker: Settings, model: ScriptedModel, registry: Registry, tmp_path: Path
) -> None:
    model.reply(sum_script())
    workflow_id = f"research-{uuid.uuid4().hex[:8]}"
    request = ResearchInput(question=SUM_QUESTION, sources=sample_sources())
    old, old_ledger = await run_to_ledger(
        client, ResearchWorkflow.run, request, task_queue=worker.task_queue, id=workflow_id
    )
    turn = text_key(SUM_QUESTION)
    assert [e.id for e in old.evidence] == [f"evidence:{turn}:{n}" for n in (1, 2, 3)]
    full = len(model.calls)

    fork_id, new, ledger = await forked(
        client, worker, registry, workflow_id, {}, removed=(f"evidence:{turn}:2",)
    )

    calls = model.calls[full:]
    assert full == 4  # choose, extract, claims, answer
    assert [c.schema_name for c in calls] == ["ClaimSet", "AnswerDraft"]
    assert f"evidence:{turn}:2" not in calls[0].text
    activities = await scheduled_activities(client, client.get_workflow_handle(fork_id))
    assert [a.activity_id for a in activities] == [f"llm:claims:{turn}", f"llm:answer:{turn}"]
    # The claim now rests on the two quotes left, and still down to the sources.
    assert [e.id for e in new.evidence] == [f"evidence:{turn}:1", f"evidence:{turn}:3"]
    claim = ledger.get(f"claim:{turn}:1").data
    assert claim["evidence_ids"] == [f"evidence:{turn}:1", f"evidence:{turn}:3"]
    tree = new.provenance(ledger)
    assert tree is not None
    walked = {node.id for node in tree.walk()}
    assert {f"evidence:{turn}:1", f"evidence:{turn}:3", "source:prices"} <= walked
    assert f"evidence:{turn}:2" not in walked
    assert new.answer == old.answer  # the total is computed from the rows, still all read
    for kept in ("source:prices", f"choice:{turn}"):
        assert ledger.get(kept) == old_ledger.get(kept)
    assert ledger.get(FORK_ID).typed(ForkOrigin).data.removed == [f"evidence:{turn}:2"]


async def test_a_research_run_with_a_claim_edited_writes_only_the_answer_again(
    client: Client, worker: Settings, model: ScriptedModel, registry: Registry
) -> None:
    model.reply(sum_script())
    workflow_id = f"research-{uuid.uuid4().hex[:8]}"
    request = ResearchInput(question=SUM_QUESTION, sources=sample_sources())
    await run_to_ledger(
        client, ResearchWorkflow.run, request, task_queue=worker.task_queue, id=workflow_id
    )
    full = len(model.calls)
    turn = text_key(SUM_QUESTION)
    edited = "The three items together cost {{total}} per day, helmet included."

    _, _, ledger = await forked(client, worker, registry, workflow_id, {f"claim:{turn}:1": edited})

    assert [c.schema_name for c in model.calls[full:]] == ["AnswerDraft"]
    assert edited in model.calls[-1].text
    assert ledger.get(f"claim:{turn}:1").data["text"] == edited
    assert [link.target for link in ledger.links_from(f"claim:{turn}:1")][-1] == FORK_ID


async def test_bad_edits_are_refused_in_one_line_before_anything_starts(
    client: Client, worker: Settings, model: ScriptedModel, registry: Registry
) -> None:
    workflow_id, _, _ = await planned(client, worker, model)
    full = len(model.calls)
    refusals = {
        "nope": "has no artifact 'nope'",
        f"goal:{GOAL}": f"goal:{GOAL} cannot be edited in a fork",
        f"final:{GOAL}": f"final:{GOAL} cannot be edited in a fork",
    }
    for artifact_id, reason in refusals.items():
        with pytest.raises(Invalid, match=re.escape(reason)):
            await fork_run(client, worker, registry, workflow_id, {artifact_id: "x"})
    with pytest.raises(Invalid, match="the new value is the one it has"):
        await fork_run(
            client, worker, registry, workflow_id, {RESULT: "result of <Step 2: Book a hotel>"}
        )
    with pytest.raises(Invalid, match="cannot be removed"):
        await fork_run(client, worker, registry, workflow_id, {}, [RESULT])
    with pytest.raises(Invalid, match="nothing to change"):
        await fork_run(client, worker, registry, workflow_id, {})
    with pytest.raises(Invalid, match="would be made again"):
        await fork_run(
            client,
            worker,
            registry,
            workflow_id,
            {STEP: "Book a hostel", f"result:step:{GOAL}:2": "x"},
        )

    reflection = f"reflect-{uuid.uuid4().hex[:8]}"
    model.reply(lambda call: {"score": 0.9, "feedback": "fine"} if call.schema_name else "draft")
    await run_to_ledger(
        client, ReflectionWorkflow.run, ReflectionInput(topic="Why durable workflows"),
        task_queue=worker.task_queue, id=reflection,
    )  # fmt: skip
    with pytest.raises(Refused, match="a ReflectionWorkflow run cannot be forked"):
        await fork_run(client, worker, registry, reflection, {"draft:x": "y"})

    release = model.hold(lambda call: call.schema_name == "Plan")
    model.reply(planner)
    running = await client.start_workflow(
        PlanExecuteWorkflow.run, Goal(text=GOAL), id=f"plan-{uuid.uuid4().hex[:8]}",
        task_queue=worker.task_queue,
    )  # fmt: skip
    try:
        with pytest.raises(NotRunning, match="is still running"):
            await fork_run(client, worker, registry, running.id, {RESULT: "x"})
    finally:
        release.set()
    await running.result()
    forks = [c for c in model.calls[full:] if c.workflow_id.startswith(f"{workflow_id}-fork")]
    assert forks == []
