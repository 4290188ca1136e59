"""Long ReAct runs on a real dev server and the scripted model: context policies that keep
what the model sees bounded, and continue-as-new between two turns."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError
from temporalio.client import Client, WorkflowFailureError, WorkflowHandle, WorkflowUpdateStage
from temporalio.exceptions import ApplicationError

from durafact._core.approval import ApprovalAnswer
from durafact._core.budget import Budget, Spent
from durafact._core.ids import approval_id, earlier_run_id, tool_approval_thread
from durafact._core.ledger import Ledger
from durafact._core.loop_context import CompactContext, PruneObservations
from durafact._core.steer import SteerNote, steer_text
from durafact._recipes import ChatInput, ReActInput, ReActResult, ReActWorkflow
from durafact._recipes.react_long import EarlierRun
from durafact._recipes.spending import OVER_BUDGET_ERROR
from durafact._runtime.settings import Settings
from durafact._runtime.worker import build_worker
from durafact.testing import Call, ScriptedModel
from tests.helpers import question_waiting, result_despite_worker_crash
from tests.workflows.test_react import DELETED, act, delete_file, final, tally, turn_calls


def turn_of(call: Call) -> int:
    return int(call.activity_id.rsplit(":", 1)[-1])


def tallying(
    turns: int, *, at: dict[int, str] | None = None, padding: str = ""
) -> Callable[[Call], str]:
    """Turns 1..`turns` each count one thing with `tally` (or make the call `at` names
    for that turn), its label `item N` and `padding`; then the answer. A fold of the
    context gets a digest naming its call."""

    def reply(call: Call) -> str:
        if not call.activity_id.startswith("llm:react:"):
            return f"DIGEST of {call.activity_id}"
        n = turn_of(call)
        if at and n in at:
            return at[n]
        if n <= turns:
            return act("tally", f'{{"label": "item {n}{padding}"}}', thought=f"Count item {n}.")
        return final(f"counted {turns} items")

    return reply


async def start(client: Client, queue: str, question: str, **kw: Any) -> WorkflowHandle:
    return await client.start_workflow(
        ReActWorkflow.run,
        ReActInput(question=question, **kw),
        id=f"react-long-{uuid.uuid4().hex[:8]}",
        task_queue=queue,
    )


async def chain_ledgers(client: Client, handle: WorkflowHandle) -> tuple[Ledger, list[EarlierRun]]:
    """The last run's ledger and the earlier runs it names, first run first."""
    ledger: Ledger = await handle.query(ReActWorkflow.artifacts)
    earlier = [a.typed(EarlierRun).data for a in ledger.all() if a.id.startswith("run:")]
    return ledger, earlier


async def run_ledger(client: Client, workflow_id: str, run_id: str) -> Ledger:
    handle = client.get_workflow_handle(workflow_id, run_id=run_id)
    return await handle.query(ReActWorkflow.artifacts)


def tallied(path: Path) -> list[str]:
    """The activity ids of the tally calls that ran, in order."""
    return [key.split(":", 1)[1] for key in path.read_text().splitlines()]


@pytest.fixture
def tally_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "tally.txt"
    monkeypatch.setenv("DURAFACT_TEST_TALLY", str(path))
    return path


async def first_run_turns(
    client: Client, settings: Settings, model: ScriptedModel, script: Callable, **kw: Any
) -> int:
    """How many turns the first run of `script` makes before it continues as new: the
    same code on the same script continues at the same turn."""
    model.reply(script)
    async with build_worker(client, settings, tools=[tally, delete_file]):
        handle = await start(client, settings.task_queue, "Where is the boundary", **kw)
        await asyncio.wait_for(handle.result(), timeout=120)
        _, earlier = await chain_ledgers(client, handle)
    return earlier[0].last_turn


# --- continue-as-new ------------------------------------------------------------------


@pytest.mark.long_running
async def test_a_thousand_turns_run_across_runs_each_tool_call_once(
    client: Client, settings: Settings, model: ScriptedModel, tally_file: Path
) -> None:
    q = "Count a thousand items"
    model.reply(tallying(1000))
    async with build_worker(client, settings, tools=[tally]):
        handle = await start(
            client,
            settings.task_queue,
            q,
            tools=["tally"],
            max_turns=1001,
            continue_after_events=2000,
        )
        first_run = handle.result_run_id
        result: ReActResult = await asyncio.wait_for(handle.result(), timeout=600)
        ledger, earlier = await chain_ledgers(client, handle)
        assert first_run is not None
        first = await run_ledger(client, handle.id, first_run)

    assert (result.ending, result.answer, result.turns) == ("answer", "counted 1000 items", 1001)
    expected = [f"tool:{q}:{n}:0" for n in range(1, 1001)]
    assert [c.id for c in result.tool_calls] == expected and all(c.ok for c in result.tool_calls)
    # Every call ran once, however many runs the loop took.
    assert tallied(tally_file) == expected
    assert len(earlier) >= 2  # three runs at least
    assert earlier[0].run_id == first_run and earlier[0].first_turn == 1
    assert [e.first_turn for e in earlier[1:]] == [e.last_turn + 1 for e in earlier[:-1]]
    # The answer's provenance reaches the first run's observations, by run id and artifact id.
    walked = {node.id for node in ledger.provenance(result.answer_id or "").walk()}
    assert earlier_run_id(first_run) in walked
    assert f"obs:{q}:1:0" in earlier[0].observations
    assert first.get(f"obs:{q}:1:0").data["text"] == "counted item 1"
    # Each run's model calls were made once: no turn was asked twice.
    assert [turn_of(c) for c in turn_calls(model)] == list(range(1, 1002))


async def test_a_worker_killed_at_the_boundary_loses_nothing(
    client: Client,
    settings: Settings,
    model: ScriptedModel,
    tally_file: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("DURAFACT_RECIPES", "tests.workflows.test_react")
    q = "Count across the boundary"
    kw: dict[str, Any] = {"tools": ["tally"], "max_turns": 30, "continue_after_events": 100}
    boundary = await first_run_turns(client, settings, model, tallying(20), **kw)
    assert 1 < boundary < 20
    tally_file.unlink()
    model.reset()
    model.reply(tallying(20))
    # The first model call of the second run is held while its worker is killed.
    result: ReActResult = await result_despite_worker_crash(
        client,
        settings,
        model,
        start=lambda: start(client, settings.task_queue, q, **kw),
        during=lambda call: call.activity_id == f"llm:react:{q}:{boundary + 1}",
    )
    assert (result.ending, result.turns) == ("answer", 21)
    expected = [f"tool:{q}:{n}:0" for n in range(1, 21)]
    assert tallied(tally_file) == expected
    assert [c.id for c in result.tool_calls] == expected
    # Only the call in flight on the killed worker was asked again.
    turns = [turn_of(c) for c in turn_calls(model)]
    assert turns == sorted([*range(1, 22), boundary + 1])


async def test_a_budget_counts_what_the_earlier_runs_spent(
    client: Client, settings: Settings, model: ScriptedModel, tally_file: Path
) -> None:
    q = "Count on a budget"
    script = tallying(20)
    kw: dict[str, Any] = {"tools": ["tally"], "max_turns": 30, "continue_after_events": 100}
    boundary = await first_run_turns(client, settings, model, script, **kw)
    # What the scripted model counts for each call: prompt and reply words.
    tokens = [len(c.text.split()) + len(script(c).split()) for c in turn_calls(model)]
    stop_after = boundary + 2
    limit = sum(tokens[:stop_after])  # spent exactly by the second run's second call
    model.reset()
    model.reply(script)
    async with build_worker(client, settings, tools=[tally]):
        handle = await start(client, settings.task_queue, q, budget=Budget(tokens=limit), **kw)
        with pytest.raises(WorkflowFailureError) as failed:
            await asyncio.wait_for(handle.result(), timeout=120)
        _, earlier = await chain_ledgers(client, handle)
    stop = failed.value.cause
    assert isinstance(stop, ApplicationError) and stop.type == OVER_BUDGET_ERROR
    # It stopped in the second run, counting the first run's calls too: without them it
    # would have gone on for as many calls again.
    assert [e.last_turn for e in earlier] == [boundary]
    assert len(turn_calls(model)) == stop_after
    spent = Spent.among(stop.details)
    assert spent is not None and spent.usage.total_tokens == limit
    assert stop.message == f"over budget: spent {limit:,} of {limit:,} tokens"


async def test_an_approval_asked_before_the_boundary_is_answered_after_it(
    client: Client, settings: Settings, model: ScriptedModel, tally_file: Path
) -> None:
    q = "Delete at the boundary"
    kw: dict[str, Any] = {
        "tools": ["tally", "delete_file"],
        "max_turns": 30,
        "continue_after_events": 100,
    }
    boundary = await first_run_turns(client, settings, model, tallying(12), **kw)
    assert 1 < boundary < 12
    model.reset()
    # The last turn of the first run asks to delete: its history is full while it waits.
    model.reply(tallying(12, at={boundary: act("delete_file", "/tmp/at-the-boundary")}))
    DELETED.clear()
    async with build_worker(client, settings, tools=[tally, delete_file]):
        handle = await start(client, settings.task_queue, q, **kw)
        first_run = handle.result_run_id
        question = await question_waiting(handle, 1)
        assert question.id == approval_id(tool_approval_thread(q), 1)
        outcome = await handle.execute_update(
            ReActWorkflow.decide, ApprovalAnswer(question_id=question.id, approved=True, by="ops")
        )
        assert outcome.approved
        result: ReActResult = await asyncio.wait_for(handle.result(), timeout=120)
        _, earlier = await chain_ledgers(client, handle)
    assert DELETED == ["/tmp/at-the-boundary"]
    assert result.ending == "answer"
    deleting = [c for c in result.tool_calls if c.tool == "delete_file"]
    assert [(c.id, c.ok) for c in deleting] == [(f"tool:{q}:{boundary}:0", True)]
    # The question and its answer belong to the first run, which continued right after.
    assert earlier[0].run_id == first_run and earlier[0].last_turn == boundary
    assert f"obs:{q}:{boundary}:0" in earlier[0].observations
    after = next(c for c in turn_calls(model) if turn_of(c) == boundary + 1)
    assert after.last_user == "Observation: deleted /tmp/at-the-boundary"


async def test_a_remembered_answer_and_a_waiting_note_cross_the_boundary(
    client: Client, settings: Settings, model: ScriptedModel, tally_file: Path
) -> None:
    q = "Delete twice across the boundary"
    kw: dict[str, Any] = {
        "tools": ["tally", "delete_file"],
        "max_turns": 30,
        "continue_after_events": 100,
    }
    boundary = await first_run_turns(client, settings, model, tallying(12), **kw)
    assert 2 < boundary < 11
    model.reset()
    again = act("delete_file", "/tmp/again")
    model.reply(tallying(12, at={boundary: again, boundary + 2: again}))
    DELETED.clear()
    async with build_worker(client, settings, tools=[tally, delete_file]):
        handle = await start(client, settings.task_queue, q, **kw)
        question = await question_waiting(handle, 1)
        # A note sent while the boundary turn waits for its person: no model call is left
        # in this run, so it goes before the next run's first one.
        note = await handle.start_update(
            ReActWorkflow.steer,
            SteerNote(text="mind the tmp dir"),
            wait_for_stage=WorkflowUpdateStage.ACCEPTED,
        )
        answer = ApprovalAnswer(question_id=question.id, approved=True, remember="call", by="ops")
        assert (await handle.execute_update(ReActWorkflow.decide, answer)).approved
        steered = await asyncio.wait_for(note.result(), timeout=60)
        result: ReActResult = await asyncio.wait_for(handle.result(), timeout=120)
        _, earlier = await chain_ledgers(client, handle)
        pending = await handle.query(ReActWorkflow.pending_questions)
    assert result.ending == "answer" and earlier[0].last_turn == boundary
    # The same call after the boundary ran on the remembered answer: one question in all.
    assert DELETED == ["/tmp/again", "/tmp/again"]
    assert pending == []
    assert steered.turn == boundary + 1
    first_call_after = next(c for c in turn_calls(model) if turn_of(c) == boundary + 1)
    assert steer_text("mind the tmp dir") in [m["content"] for m in first_call_after.messages]


async def test_a_carry_as_large_as_the_limit_does_not_continue_on_every_turn(
    client: Client, settings: Settings, model: ScriptedModel, tally_file: Path
) -> None:
    q = "Count past the limit"
    # Long labels (in each reply and each observation) take the view past the limit in
    # about 15 turns, so that most of the 40 run with a carry larger than the limit.
    model.reply(tallying(40, padding=", one of a long list of things to count" * 8))
    async with build_worker(client, settings, tools=[tally]):
        handle = await start(
            client, settings.task_queue, q, tools=["tally"], max_turns=41,
            continue_after_bytes=10_000,
        )  # fmt: skip
        result: ReActResult = await asyncio.wait_for(handle.result(), timeout=120)
        _, earlier = await chain_ledgers(client, handle)
        last = await client.get_workflow_handle(handle.id).fetch_history()
    assert result.ending == "answer" and len(result.tool_calls) == 40
    # The view, carried whole, outgrew the limit: the last run began with more than it.
    assert last.events[0].ByteSize() > 10_000
    # Yet every run made turns of its own, half the limit's worth at least.
    assert all(e.last_turn - e.first_turn >= 1 for e in earlier)
    assert len(earlier) < 20


# --- context policies -----------------------------------------------------------------


async def counted_run(
    client: Client, settings: Settings, model: ScriptedModel, q: str, turns: int, **kw: Any
) -> tuple[ReActResult, Ledger]:
    """The result and the ledger of `q` run to its answer after `turns` tally calls."""
    model.reply(tallying(turns))
    async with build_worker(client, settings, tools=[tally]):
        handle = await start(
            client, settings.task_queue, q, tools=["tally"], max_turns=turns + 1, **kw
        )
        result: ReActResult = await asyncio.wait_for(handle.result(), timeout=120)
        return result, await handle.query(ReActWorkflow.artifacts)


async def test_prune_observations_shows_old_observations_by_their_first_line(
    client: Client, settings: Settings, model: ScriptedModel, tally_file: Path
) -> None:
    q = "Count and prune"
    result, ledger = await counted_run(
        client, settings, model, q, 60, context=PruneObservations(keep_turns=5)
    )
    assert result.ending == "answer"
    seen = turn_calls(model)[49]  # what the model saw at turn 50
    assert turn_of(seen) == 50
    observations = [m["content"] for m in seen.messages if m["content"].startswith("Observation")]
    assert len(observations) == 49
    for n, text in enumerate(observations[:44], start=1):
        assert text == f"Observation: counted item {n}\n[pruned: see obs:{q}:{n}:0]"
    assert observations[44:] == [f"Observation: counted item {n}" for n in range(45, 50)]
    # Every reply stays, and the pruned observations stay whole in the ledger.
    assert sum(1 for m in seen.messages if m["role"] == "assistant") == 49
    assert ledger.get(f"obs:{q}:1:0").data["text"] == "counted item 1"


async def test_compact_folds_all_but_the_last_turns_into_a_digest(
    client: Client, settings: Settings, model: ScriptedModel, tally_file: Path
) -> None:
    q = "Count and compact"
    result, ledger = await counted_run(
        client, settings, model, q, 60, context=CompactContext(keep_turns=5, max_tokens=100)
    )
    assert result.ending == "answer"
    seen = turn_calls(model)[49]
    assert turn_of(seen) == 50
    roles = [m["role"] for m in seen.messages]
    # The system message, the question, the digest, then the last five turns whole.
    assert roles == ["system", "user", "user", *["assistant", "user"] * 5]
    digest = seen.messages[2]["content"]
    version = int(digest.split("]", 1)[0].rsplit(":", 1)[1])
    assert digest.startswith(f"[digest:{q}:{version}] What turns 1 to 44 did (folded):\n")
    assert digest.endswith(f"DIGEST of llm:digest:{q}:{version}")
    assert [m["content"] for m in seen.messages[4::2]] == [
        f"Observation: counted item {n}" for n in range(45, 50)
    ]
    assert "Count item 45." in seen.messages[3]["content"]
    # The fold's call read the turns it folded; the digest is an artifact.
    fold = next(c for c in model.calls if c.activity_id == f"llm:digest:{q}:{version}")
    assert f"[msg:{q}:" in fold.text and "counted item 44" in fold.text
    assert f"[digest:{q}:{version - 1}] DIGEST of llm:digest:{q}:{version - 1}" in fold.text
    assert ledger.get(f"digest:{q}:{version}").data["last_turn"] == 44
    assert len(ledger.get(f"obs:{q}:1:0").data["text"]) > 0


def test_a_chat_refuses_a_context_policy_its_memory_does_the_bounding() -> None:
    with pytest.raises(ValidationError, match="a chat keeps its conversation bounded with"):
        ChatInput(context=PruneObservations())
    assert ChatInput().context.kind == "keep_all"
