"""ReActWorkflow end to end on a real dev server: the scripted model plays the agent, the
worker runs the real calculator and the tools defined here.

This module is also a recipes module (`TOOLS`), so a `worker.py` process started with
DURAFACT_RECIPES=tests.workflows.test_react runs `tally` too.
"""

from __future__ import annotations

import asyncio
import json
import os
import uuid
from collections.abc import AsyncIterator, Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client, WorkflowHandle

from durafact._activities.tools import tool
from durafact._core.approval import ApprovalAnswer, ApprovalPolicy
from durafact._core.ids import approval_id, tool_approval_thread
from durafact._core.ledger import Ledger
from durafact._core.react import Observation
from durafact._core.sources import Doc, SourceRef, SourceSpec
from durafact._recipes import ReActInput, ReActResult, ReActWorkflow
from durafact._recipes.react_search import SEARCH_SOURCES
from durafact._recipes.recipe import STATUS_ATTRIBUTE
from durafact._runtime.settings import Settings
from durafact._runtime.worker import build_worker
from durafact.testing import Call, ScriptedModel, ToolCalls
from tests.helpers import (
    local_activities,
    question_waiting,
    result_despite_worker_crash,
    scheduled_activities,
)

# --- tools of these tests -------------------------------------------------------------

DELETED: list[str] = []
LONG_TEXT = "".join(f"line {i:04d} of the report\n" for i in range(250))  # 5500 characters


@tool(destructive=True)
def delete_file(path: str) -> str:
    """Delete a file for good."""
    DELETED.append(path)
    return f"deleted {path}"


@tool
def fetch_report() -> str:
    """The whole quarterly report."""
    return LONG_TEXT


@tool
def tally(label: str, idempotency_key: str) -> str:
    """Count something once per call (writes the call's key to DURAFACT_TEST_TALLY)."""
    with open(os.environ["DURAFACT_TEST_TALLY"], "a") as out:
        out.write(f"{idempotency_key}\n")
    return f"counted {label}"


TOOLS = [tally]


@pytest.fixture
async def react_worker(client: Client, settings: Settings) -> AsyncIterator[Settings]:
    DELETED.clear()
    async with build_worker(client, settings, tools=[delete_file, fetch_report]):
        yield settings


# --- scripting the agent --------------------------------------------------------------

Reply = str | ToolCalls | Callable[[Call], "str | ToolCalls"]


def turns(*replies: Reply) -> Callable[[Call], str | ToolCalls]:
    """Reply n answers the model call of turn n; the last one answers every later turn."""

    def reply(call: Call) -> str | ToolCalls:
        if not call.activity_id.startswith("llm:react:"):
            return "a short summary: 250 report lines, quarter three"
        turn = int(call.activity_id.rsplit(":", 1)[-1])
        one = replies[min(turn, len(replies)) - 1]
        return one(call) if callable(one) else one

    return reply


def act(tool: str, arguments: str, thought: str = "I should use a tool.") -> str:
    return f"Thought: {thought}\nAction: {tool}\nAction Input: {arguments}\nPAUSE"


def final(answer: str) -> str:
    return f"Thought: I now know the answer.\nFinal Answer: {answer}"


def turn_calls(model: ScriptedModel) -> list[Call]:
    return model.calls_for("llm:react:")


async def start(client: Client, settings: Settings, question: str, **kw: Any) -> WorkflowHandle:
    return await client.start_workflow(
        ReActWorkflow.run,
        ReActInput(question=question, **kw),
        id=f"react-{uuid.uuid4().hex[:8]}",
        task_queue=settings.task_queue,
    )


async def run(client: Client, settings: Settings, question: str, **kw: Any) -> ReActResult:
    handle = await start(client, settings, question, **kw)
    return await asyncio.wait_for(handle.result(), timeout=60)


async def status_of(handle: WorkflowHandle) -> str | None:
    return (await handle.describe()).typed_search_attributes.get(STATUS_ATTRIBUTE)


async def ledger_of(handle: WorkflowHandle) -> Ledger:
    return await handle.query(ReActWorkflow.artifacts)


# --- text protocol --------------------------------------------------------------------


async def test_text_protocol_answers_with_the_calculator(
    client: Client, react_worker: Settings, model: ScriptedModel
) -> None:
    q = "What is 17 times 23"
    model.reply(turns(act("calculator", '{"expression": "17 * 23"}'), final("391")))
    handle = await start(client, react_worker, q)
    result: ReActResult = await handle.result()

    assert (result.ending, result.answer, result.turns) == ("answer", "391", 2)
    assert [(c.id, c.tool, c.ok) for c in result.tool_calls] == [
        (f"tool:{q}:1:0", "calculator", True)
    ]
    first, second = turn_calls(model)
    # The format, the tool listing and the stop sequence reach the model.
    assert "Action Input:" in first.messages[0]["content"]
    assert (
        "- calculator: Evaluate an arithmetic expression exactly." in first.messages[0]["content"]
    )
    assert first.body["stop"] == ["Observation:"]
    assert first.last_user == f"Question: {q}"
    # The observation is the calculator's real answer, after the model's own turn.
    assert [m["role"] for m in second.messages] == ["system", "user", "assistant", "user"]
    assert second.last_user == "Observation: 391"

    # The worker's Python tools are listed by a local activity (see the test below).
    listed = await local_activities(client, handle)
    assert [(a.activity_id, a.summary) for a in listed] == [(f"tools:{q}", "get tools: calculator")]
    scheduled = await scheduled_activities(client, handle)
    assert [(s.activity_id, s.summary) for s in scheduled] == [
        (f"llm:react:{q}:1", "request model: turn 1"),
        (f"tool:{q}:1:0", "call tool: calculator"),
        (f"llm:react:{q}:2", "request model: turn 2"),
    ]
    assert scheduled[1].input["idempotency_key"] == f"{handle.id}:tool:{q}:1:0"
    ledger = await ledger_of(handle)
    assert result.answer_id == f"answer:{q}"
    assert [link.target for link in ledger.links_from(result.answer_id, "based_on")] == [
        f"obs:{q}:1:0"
    ]
    assert [a.id for a in ledger.all() if a.id.startswith("msg:")] == [
        f"msg:{q}:{n}" for n in range(4)
    ]
    assert await status_of(handle) == "completed"
    progress = await handle.query(ReActWorkflow.progress, 0)
    statuses = [e.status for e in progress.events if e.kind == "status"]
    assert statuses == ["turn:1", "calling:calculator", "turn:2", "completed"]
    kinds = [e.kind for e in progress.events]
    assert kinds.index("thought") < kinds.index("action") < kinds.index("observation")


async def test_a_reply_that_breaks_the_format_is_corrected_and_counts_a_turn(
    client: Client, react_worker: Settings, model: ScriptedModel
) -> None:
    model.reply(
        turns(
            "I think it is about 400.",
            act("calculator", "2+2") + "\nFinal Answer: 4",
            final("4"),
        )
    )
    result = await run(client, react_worker, "What is 2 plus 2")
    assert (result.ending, result.answer, result.turns, result.tool_calls) == ("answer", "4", 3, [])
    _, second, third = turn_calls(model)
    assert second.last_user.startswith("Your reply has neither an Action nor a Final Answer.")
    assert "Action: the tool's name (one of: calculator)" in second.last_user
    assert third.last_user.startswith("Your reply has both an Action and a Final Answer.")


async def test_a_tool_error_is_the_next_observation(
    client: Client, react_worker: Settings, model: ScriptedModel
) -> None:
    model.reply(turns(act("calculator", "1 / 0"), act("calculator", "1 / 1"), final("1")))
    result = await run(client, react_worker, "Divide one by zero")
    assert result.ending == "answer"
    assert [(c.ok, c.error_type) for c in result.tool_calls] == [(False, "ToolError"), (True, None)]
    second = turn_calls(model)[1]
    assert second.last_user.startswith("Observation: CalculatorError:")
    assert "zero" in second.last_user


async def test_an_unknown_tool_is_an_observation_and_never_reaches_the_worker(
    client: Client, react_worker: Settings, model: ScriptedModel
) -> None:
    q = "Weather in Oslo"
    # fetch_report is on the worker, but not one of this run's tools.
    model.reply(turns(act("get_weather", "Oslo"), act("fetch_report", "{}"), final("unknown")))
    handle = await start(client, react_worker, q)
    result: ReActResult = await handle.result()
    assert [(c.tool, c.error_type) for c in result.tool_calls] == [
        ("get_weather", "UnknownTool"),
        ("fetch_report", "UnknownTool"),
    ]
    second = turn_calls(model)[1]
    assert second.last_user == (
        "Observation: 'get_weather' is not a valid tool, try one of [calculator]"
    )
    scheduled = await scheduled_activities(client, handle)
    assert not [s for s in scheduled if s.activity_id.startswith("tool:")]


async def test_max_turns_ends_the_run_visibly(
    client: Client, react_worker: Settings, model: ScriptedModel
) -> None:
    counter = iter(range(100))
    model.reply(turns(lambda call: act("calculator", f"{next(counter)} + 1")))
    handle = await start(client, react_worker, "Count for ever", max_turns=3)
    result: ReActResult = await handle.result()
    assert (result.ending, result.answer, result.answer_id, result.turns) == (
        "turn_limit",
        None,
        None,
        3,
    )
    assert len(turn_calls(model)) == 3 and len(result.tool_calls) == 3
    assert await status_of(handle) == "turn_limit"


async def test_the_same_failing_call_in_a_row_stops_the_loop(
    client: Client, react_worker: Settings, model: ScriptedModel
) -> None:
    model.reply(turns(act("calculator", '{"expression": "2 +"}')))
    handle = await start(client, react_worker, "Keep failing", loop_limit=3, max_turns=8)
    result: ReActResult = await handle.result()
    assert (result.ending, result.turns, result.answer) == ("looping", 3, None)
    assert [c.ok for c in result.tool_calls] == [False, False, False]
    assert await status_of(handle) == "looping"
    events = await handle.query(ReActWorkflow.progress, 0)
    assert any(e.kind == "looping" for e in events.events)


async def test_a_long_observation_is_truncated_for_the_model_and_kept_whole(
    client: Client, react_worker: Settings, model: ScriptedModel
) -> None:
    q = "Summarize the report"
    model.reply(turns(act("fetch_report", ""), final("done")))
    handle = await start(client, react_worker, q, tools=["fetch_report"], max_observation_chars=300)
    result: ReActResult = await handle.result()
    shown = turn_calls(model)[1].last_user
    assert (
        shown == f"Observation: {LONG_TEXT[:300]}\n[truncated: 300 of {len(LONG_TEXT)} characters]"
    )
    full = (await ledger_of(handle)).get(f"obs:{q}:1:0").typed(Observation).data
    assert full.text == LONG_TEXT
    # The result does not carry the conversation or the observation again.
    assert result.answer == "done"
    assert "line 0001" not in result.model_dump_json()


async def test_summarize_policy_shows_one_model_calls_summary(
    client: Client, react_worker: Settings, model: ScriptedModel
) -> None:
    q = "Read the report"
    model.reply(turns(act("fetch_report", ""), final("done")))
    await run(
        client,
        react_worker,
        q,
        tools=["fetch_report"],
        max_observation_chars=300,
        observation_policy="summarize",
    )
    (summary_call,) = model.calls_for("llm:summary:")
    assert summary_call.activity_id == f"llm:summary:obs:{q}:1:0"
    assert LONG_TEXT in summary_call.text  # the summarizer reads the whole observation
    assert turn_calls(model)[1].last_user == (
        "Observation: a short summary: 250 report lines, quarter three\n"
        f"[summarized from {len(LONG_TEXT)} characters]"
    )


# --- native protocol ------------------------------------------------------------------


async def test_native_protocol_runs_parallel_calls_at_once(
    client: Client, react_worker: Settings, model: ScriptedModel
) -> None:
    q = "Add and multiply"
    model.reply(
        turns(
            ToolCalls(
                [("calculator", {"expression": "2 + 3"}), ("calculator", {"expression": "4 * 5"})],
                ids=["call_a", "call_b"],
            ),
            "5 and 20",
        )
    )
    handle = await start(client, react_worker, q, protocol="native")
    result: ReActResult = await handle.result()
    assert (result.ending, result.answer, result.turns) == ("answer", "5 and 20", 2)
    first, second = turn_calls(model)
    assert first.tool_names == ["calculator"]
    assert "stop" not in first.body
    tool_messages = [m for m in second.messages if m["role"] == "tool"]
    assert [(m["tool_call_id"], m["content"]) for m in tool_messages] == [
        ("call_a", "5"),
        ("call_b", "20"),
    ]
    # Both calls were scheduled by one workflow task, before either completed.
    history = await handle.fetch_history()
    kinds = [e.event_type for e in history.events]
    first_call, second_call = (
        i
        for i, e in enumerate(history.events)
        if e.activity_task_scheduled_event_attributes.activity_id.startswith("tool:")
    )
    assert EventType.EVENT_TYPE_WORKFLOW_TASK_COMPLETED not in kinds[first_call:second_call]


async def test_a_short_run_lists_python_tools_locally_and_records_no_patch_marker(
    client: Client, react_worker: Settings, model: ScriptedModel
) -> None:
    """What a short run stores beyond the calls themselves stays small: the worker's
    Python tools are listed by a local activity, so the first model call is scheduled by
    the first workflow task (no list_tools activity, no workflow task waiting for it),
    and the run records no patch marker (0.2.0 is one baseline: no patch is older)."""
    q = "What is 6 times 7"
    model.reply(turns(ToolCalls([("calculator", {"expression": "6 * 7"})], ids=["c"]), "42"))
    handle = await start(client, react_worker, q, protocol="native")
    result: ReActResult = await handle.result()
    assert (result.answer, [c.ok for c in result.tool_calls]) == ("42", [True])

    events = (await handle.fetch_history()).events
    first_task = next(
        e.event_id for e in events if e.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_COMPLETED
    )
    scheduled = [
        e.activity_task_scheduled_event_attributes
        for e in events
        if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED
    ]
    assert [a.activity_type.name for a in scheduled] == [
        "request_model",
        "call_tool",
        "request_model",
    ]
    assert scheduled[0].workflow_task_completed_event_id == first_task
    (listed,) = await local_activities(client, handle)
    assert (listed.activity_type, [s["name"] for s in listed.result["specs"]]) == (
        "list_tools",
        ["calculator"],
    )
    converter = client.data_converter.payload_converter
    patches = [
        converter.from_payload(
            e.marker_recorded_event_attributes.details["patch-data"].payloads[0], dict
        )["id"]
        for e in events
        if e.marker_recorded_event_attributes.marker_name == "core_patch"
    ]
    assert patches == []
    # The listing is still the run's artifact, as before.
    assert (await ledger_of(handle)).get(f"tools:{q}").type == "ToolList"


# --- destructive tools ----------------------------------------------------------------


async def test_a_destructive_tool_runs_once_a_person_approves(
    client: Client, react_worker: Settings, model: ScriptedModel
) -> None:
    q = "Clean up the temp file"
    model.reply(turns(act("delete_file", "/tmp/old.txt"), final("deleted")))
    handle = await start(client, react_worker, q, tools=["delete_file"])
    question = await question_waiting(handle, 1)
    assert question.id == approval_id(tool_approval_thread(q), 1)
    assert "delete_file" in question.text and "/tmp/old.txt" in question.text
    assert await status_of(handle) == "awaiting_approval"
    assert DELETED == []
    await handle.execute_update(
        ReActWorkflow.decide, ApprovalAnswer(question_id=question.id, approved=True, by="ops")
    )
    result: ReActResult = await handle.result()
    assert DELETED == ["/tmp/old.txt"]
    assert result.ending == "answer" and result.tool_calls[0].ok
    assert turn_calls(model)[1].last_user == "Observation: deleted /tmp/old.txt"


async def test_a_rejected_destructive_call_never_runs_and_the_model_hears_why(
    client: Client, react_worker: Settings, model: ScriptedModel
) -> None:
    model.reply(turns(act("delete_file", "/etc/passwd"), final("I was not allowed to.")))
    handle = await start(client, react_worker, "Delete the password file", tools=["delete_file"])
    question = await question_waiting(handle, 1)
    await handle.signal(
        ReActWorkflow.answer,
        ApprovalAnswer(question_id=question.id, approved=False, reason="never that file"),
    )
    result: ReActResult = await handle.result()
    assert DELETED == []
    assert [(c.ok, c.error_type) for c in result.tool_calls] == [(False, "NotApproved")]
    assert turn_calls(model)[1].last_user == "Observation: not approved: never that file"
    scheduled = await scheduled_activities(client, handle)
    assert not [s for s in scheduled if s.activity_id.startswith("tool:")]


async def test_an_unanswered_destructive_call_times_out_as_not_approved(
    client: Client, react_worker: Settings, model: ScriptedModel
) -> None:
    model.reply(turns(act("delete_file", "/tmp/x"), final("nobody answered")))
    result = await run(
        client,
        react_worker,
        "Delete x if someone agrees",
        tools=["delete_file"],
        approval=ApprovalPolicy(timeout=timedelta(seconds=1)),
    )
    assert DELETED == []
    assert result.ending == "answer"
    assert turn_calls(model)[1].last_user == "Observation: not approved: timed out"


# --- search_sources: a workflow-side tool with provenance -----------------------------

TIDES = {
    "brest.md": "# Tides at Brest\n\nThe spring tide at Brest rises about seven metres "
    "above low water.\n\nThe harbour master publishes the tide tables every month.",
    "moon.md": "# The moon\n\nThe moon pulls the sea: every tide follows it.",
    "calendar.md": "# Calendar\n\nA tide table lists high water for each day.",
    "recipes.md": "# Crepes\n\nFlour, eggs, milk and a pinch of salt.",
}


def tide_docs(tmp_path: Path) -> SourceSpec:
    root = tmp_path / "docs"
    root.mkdir()
    for name, text in TIDES.items():
        (root / name).write_text(text)
    return SourceSpec.files(str(root))


async def test_search_sources_reads_the_best_refs_and_the_answer_walks_down_to_the_source(
    client: Client, react_worker: Settings, model: ScriptedModel, tmp_path: Path
) -> None:
    q = "How high is the spring tide at Brest"
    call = f"tool:{q}:1:0"
    model.reply(
        turns(act(SEARCH_SOURCES, "spring tide Brest"), final("About seven metres (brest.md)."))
    )
    handle = await start(
        client, react_worker, q, sources=[tide_docs(tmp_path)], source_refs=3, source_docs=1
    )
    result: ReActResult = await handle.result()
    assert (result.ending, result.answer) == ("answer", "About seven metres (brest.md).")
    assert [(c.id, c.tool, c.ok) for c in result.tool_calls] == [(call, SEARCH_SOURCES, True)]

    # Offered beside the worker's tools, with its arguments.
    first, second = turn_calls(model)
    system = first.messages[0]["content"]
    assert "- calculator:" in system
    assert "- search_sources: Search the configured sources (docs)" in system
    assert 'Action Input: {"query": string (What to look for: a few keywords.)}' in system

    # The call's refs: the best three of the files that share a word with the query,
    # owned by the call; only the best one was read.
    ledger = await ledger_of(handle)
    refs = [a.typed(SourceRef) for a in ledger.all() if a.id.startswith("ref:")]
    assert len(refs) == 3
    assert all(r.id.endswith(f":{call}") for r in refs)
    assert "recipes.md" not in [r.data.uid for r in refs]
    docs = [a.typed(Doc) for a in ledger.all() if a.id.startswith("resolved:")]
    assert [(d.data.uid, d.data.text) for d in docs] == [("brest.md", TIDES["brest.md"])]
    (doc,) = docs
    best_ref = doc.data.ref_id
    scheduled = await scheduled_activities(client, handle)
    assert [(s.activity_id, s.summary) for s in scheduled] == [
        (f"llm:react:{q}:1", "request model: turn 1"),
        (f"search:docs:{call}", "search source: docs"),
        (f"resolve:{best_ref}", "resolve doc: brest.md"),
        (f"llm:react:{q}:2", "request model: turn 2"),
    ]
    # No call_tool activity, and only the worker's tool listed: search_sources never
    # reaches a worker's tool catalog.
    (listed,) = await local_activities(client, handle)
    assert [spec["name"] for spec in listed.result["specs"]] == ["calculator"]

    # The model sees the document's id and an excerpt; the observation is linked to it.
    shown = second.last_user
    assert shown.startswith("Observation: 1 of 3 references for 'spring tide Brest' read (docs)")
    assert f"[{doc.id}] Tides at Brest (docs: brest.md)" in shown
    assert "rises about seven metres above low water" in shown

    # answer -> observation -> document -> ref -> source, and nothing else below it.
    chain = []
    node = ledger.provenance(result.answer_id)
    while True:
        chain.append((node.relation, node.id))
        if not node.children:
            break
        (node,) = node.children
    assert chain == [
        (None, f"answer:{q}"),
        ("based_on", f"obs:{q}:1:0"),
        ("based_on", doc.id),
        ("materialized_from", best_ref),
        ("found_by", "source:docs"),
    ]
    assert ledger.get("source:docs").typed(SourceSpec).data.root == str(tmp_path / "docs")


async def test_native_protocol_offers_search_sources_by_its_spec(
    client: Client, react_worker: Settings, model: ScriptedModel, tmp_path: Path
) -> None:
    q = "Tell me about the moon and the tide"
    model.reply(
        turns(
            ToolCalls([(SEARCH_SOURCES, {"query": "moon tide"})], ids=["call_s"]),
            "The moon pulls the sea.",
        )
    )
    handle = await start(
        client, react_worker, q, protocol="native", tools=[], sources=[tide_docs(tmp_path)]
    )
    result: ReActResult = await handle.result()
    assert (result.ending, result.answer) == ("answer", "The moon pulls the sea.")
    first, second = turn_calls(model)
    assert first.tool_names == [SEARCH_SOURCES]
    (schema,) = first.body["tools"]
    assert schema["function"]["parameters"]["required"] == ["query"]
    (tool_message,) = [m for m in second.messages if m["role"] == "tool"]
    assert tool_message["tool_call_id"] == "call_s"
    assert tool_message["content"].startswith("2 of ")
    assert "The moon pulls the sea" in tool_message["content"]
    ledger = await ledger_of(handle)
    read = [link.target for link in ledger.links_from(f"obs:{q}:1:0", "based_on")]
    assert len(read) == 2 and all(ledger.get(d).type == "Doc" for d in read)
    # No worker tool was named, so no tool list was asked for.
    scheduled = await scheduled_activities(client, handle)
    assert not [s for s in scheduled if s.activity_id.startswith(("tools:", "tool:"))]
    assert await local_activities(client, handle) == []


async def test_a_search_nothing_matches_says_so_and_reads_nothing(
    client: Client, react_worker: Settings, model: ScriptedModel, tmp_path: Path
) -> None:
    q = "Who won the chess final"
    model.reply(turns(act(SEARCH_SOURCES, "chess grandmaster"), final("I do not know.")))
    handle = await start(client, react_worker, q, tools=[], sources=[tide_docs(tmp_path)])
    result: ReActResult = await handle.result()
    assert result.tool_calls[0].ok
    assert turn_calls(model)[1].last_user == (
        "Observation: no documents match 'chess grandmaster' in docs; try other words"
    )
    ledger = await ledger_of(handle)
    assert not [a for a in ledger.all() if a.id.startswith(("ref:", "resolved:"))]


def test_search_sources_needs_sources_and_distinct_source_ids(tmp_path: Path) -> None:
    spec = SourceSpec.files(str(tmp_path))
    with pytest.raises(ValueError, match="search_sources needs sources"):
        ReActInput(question="q", tools=["search_sources"])
    with pytest.raises(ValueError, match="two sources are named 'docs'"):
        ReActInput(question="q", sources=[spec, spec])
    assert ReActInput(question="q", tools=["search_sources"], sources=[spec]).sources == [spec]


# --- history discipline and crashes ---------------------------------------------------


async def test_each_model_call_input_stays_the_same_size_as_the_conversation_grows(
    client: Client, react_worker: Settings, model: ScriptedModel
) -> None:
    q = "Sum many numbers"
    model.reply(turns(lambda call: act("calculator", f"{len(call.messages)} * 1000003")))
    handle = await start(client, react_worker, q, max_turns=8)
    result: ReActResult = await handle.result()
    assert result.turns == 8 and len(result.tool_calls) == 8
    history = await handle.fetch_history()
    sizes = {
        e.activity_task_scheduled_event_attributes.activity_id: len(
            e.activity_task_scheduled_event_attributes.input.payloads[0].data
        )
        for e in history.events
        if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED
    }
    # Turn 8 sees 15 messages, turn 2 three: the input differs only in the span's count.
    assert len(turn_calls(model)[7].messages) == 16
    assert sizes[f"llm:react:{q}:8"] - sizes[f"llm:react:{q}:2"] <= 1
    # No earlier observation or reply is copied into a later input.
    later = json.loads(
        next(
            e.activity_task_scheduled_event_attributes.input.payloads[0].data
            for e in history.events
            if e.activity_task_scheduled_event_attributes.activity_id == f"llm:react:{q}:8"
        )
    )
    assert "1000003" not in json.dumps(later)


async def test_a_worker_killed_mid_loop_does_not_run_a_completed_tool_call_again(
    client: Client,
    settings: Settings,
    model: ScriptedModel,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    tally_file = tmp_path / "tally.txt"
    monkeypatch.setenv("DURAFACT_TEST_TALLY", str(tally_file))
    monkeypatch.setenv("DURAFACT_RECIPES", "tests.workflows.test_react")
    q = "Count two things"
    model.reply(turns(act("tally", "apples"), act("tally", "pears"), final("two")))
    result: ReActResult = await result_despite_worker_crash(
        client,
        settings,
        model,
        start=lambda: start(client, settings, q, tools=["tally"]),
        during=lambda call: call.activity_id == f"llm:react:{q}:3",
    )
    assert (result.ending, result.answer) == ("answer", "two")
    keys = tally_file.read_text().splitlines()
    assert [k.split(":", 1)[1] for k in keys] == [f"tool:{q}:1:0", f"tool:{q}:2:0"]
    # The completed turns' model calls were not made again either.
    assert [c.activity_id.rsplit(":", 1)[-1] for c in turn_calls(model)] == ["1", "2", "3", "3"]


def test_the_result_does_not_carry_the_ledger() -> None:
    assert "ledger" not in ReActResult.model_fields
