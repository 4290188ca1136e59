"""The tool loop: ReActWorkflow vs a hand-written Temporal loop, per model call, to 1,000 turns.

    python -m bench.react_bench [--turns 3,30,300,1000] [--hand-written-up-to 300]

One run starts a real dev server, the scripted model (no delay) and an in-process
worker with one tool, `lookup`, that returns a fixed 500-character document. For
N turns the model asks for N lookups (text protocol), then answers. Both loops
make the same model and tool calls; the hand-written one sends the whole
conversation inline in every model activity's input, as a person writes it (and
as Temporal's OpenAI Agents plugin and Pydantic AI do), while durafact sends a
constant-size reference. durafact runs twice: with the default context policy
(`keep_all`) and with `compact`. A long durafact run continues as new between two
turns (ReActSettings.continue_after_events / continue_after_bytes, or when the
server suggests it): the figures add up every run of the chain.

Printed per system and N: stored history bytes per model call over all runs of the
chain, the runs, the largest single run's history, and the bytes of the last model
request (what the model is sent at the end). The hand-written loop stops at
`--hand-written-up-to` turns: its history grows with the square of the turns, and
past about 400 of them its one run passes Temporal's 50 MB limit and is terminated.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import tempfile
import uuid
from dataclasses import dataclass
from pathlib import Path

from temporalio.api.enums.v1 import EventType
from temporalio.client import Client

from bench._common import dev_stack
from bench.handwritten import QUESTION, HandWrittenLoop
from durafact._activities.tools import tool
from durafact._core.loop_context import CompactContext, ContextPolicy, KeepAll
from durafact._recipes import ReActInput, ReActResult, ReActWorkflow
from durafact._runtime.codec import data_converter
from durafact.testing import Call, ScriptedModel

TURNS = (3, 30, 300, 1000)
DOCUMENT = (
    "Durable execution records every step of a program in an event history, so that after a "
    "crash the program is replayed from that history and continues where it stopped, with "
    "every completed call's result taken from the record instead of being made again. For an "
    "agent that calls a model many times this means that no paid call is repeated and no "
    "tool with side effects runs twice; it also means the history itself must stay small, "
    "because it is read back on every replay and has a hard size limit on the server side."
)[:500]


@tool
def lookup(query: str) -> str:
    """Look up a topic in the reference library."""
    return DOCUMENT


def scripted(turns: int):
    def reply(call: Call) -> str:
        if call.activity_id.startswith("llm:digest:"):
            return (
                "Looked up the research on durable execution part by part; each part said "
                "that a replayed history must stay small."
            )
        if call.activity_id.startswith("llm:react:"):
            done = int(call.activity_id.rsplit(":", 1)[-1]) - 1
        else:  # the hand-written loop: its turn is in its conversation
            done = sum(1 for m in call.messages if m.get("role") == "assistant")
        if done < turns:
            return (
                f"Thought: I need part {done + 1} of the research.\n"
                f'Action: lookup\nAction Input: {{"query": "durable execution {done + 1}"}}'
            )
        return "Final Answer: The history is replayed and capped, so it must stay small."

    return reply


@dataclass
class Row:
    total: int  # history bytes, every run of the chain
    calls: int  # model calls
    runs: int
    largest: int  # the largest run's history bytes
    last_request: int  # bytes of the last model request's body
    stored: int = 0  # bytes the payload store took for the run


def store_bytes(store: Path) -> int:
    return sum(f.stat().st_size for f in store.rglob("*") if f.is_file())


async def chain_row(client: Client, workflow_id: str, first_run: str, model: ScriptedModel) -> Row:
    """What one finished workflow stored, following continue-as-new from `first_run`."""
    total = calls = runs = largest = 0
    run_id: str | None = first_run
    while run_id:
        history = await client.get_workflow_handle(workflow_id, run_id=run_id).fetch_history()
        size = sum(event.ByteSize() for event in history.events)
        total, runs, largest = total + size, runs + 1, max(largest, size)
        calls += sum(
            1
            for event in history.events
            if event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED
            and event.activity_task_scheduled_event_attributes.activity_type.name == "request_model"
        )
        last = history.events[-1]
        run_id = (
            last.workflow_execution_continued_as_new_event_attributes.new_execution_run_id
            if last.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_CONTINUED_AS_NEW
            else None
        )
    request = len(json.dumps(model.calls[-1].body).encode())
    return Row(total, calls, runs, largest, request)


async def run_durafact(stack, turns: int, context: ContextPolicy) -> Row:
    stack.model.reset()
    stack.model.reply(scripted(turns))
    wid = f"react-bench-{uuid.uuid4().hex[:8]}"
    handle = await stack.client.start_workflow(
        ReActWorkflow.run,
        ReActInput(
            question=QUESTION,
            tools=["lookup"],
            max_turns=turns + 1,
            loop_limit=0,
            context=context,
        ),
        id=wid,
        task_queue=stack.settings.task_queue,
    )
    result: ReActResult = await handle.result()
    if result.ending != "answer" or len(result.tool_calls) != turns:
        raise RuntimeError(f"{result.ending} after {len(result.tool_calls)} calls, not {turns}")
    return await chain_row(stack.client, wid, handle.result_run_id or "", stack.model)


async def run_hand_written(stack, turns: int) -> Row:
    stack.model.reset()
    stack.model.reply(scripted(turns))
    wid = f"hand-bench-{uuid.uuid4().hex[:8]}"
    handle = await stack.client.start_workflow(
        HandWrittenLoop.run, turns, id=wid, task_queue=stack.settings.task_queue
    )
    await handle.result()
    return await chain_row(stack.client, wid, handle.result_run_id or "", stack.model)


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", default=",".join(map(str, TURNS)))
    parser.add_argument("--hand-written-up-to", type=int, default=300)
    args = parser.parse_args()
    sizes = [int(n) for n in args.turns.split(",")]
    systems = {
        "durafact keep_all": KeepAll(),
        "durafact compact": CompactContext(keep_turns=10, max_tokens=2000),
    }
    rows: dict[tuple[str, int], Row] = {}
    with tempfile.TemporaryDirectory() as payloads:
        store = Path(payloads)
        async with dev_stack(scripted(sizes[0])) as plain:
            # The data converter every durafact client and worker uses: payloads of 128 KiB
            # or more (a long loop's carry) go to the payload store, here a folder.
            converter = data_converter({"DURAFACT_PAYLOADS": f"file:{store}"})
            client = Client(**{**plain.client.config(), "data_converter": converter})
            stack = dataclasses.replace(plain, client=client)
            async with stack.worker(tools=[lookup]):
                for turns in sizes:
                    for name, context in systems.items():
                        before = store_bytes(store)
                        row = await run_durafact(stack, turns, context)
                        rows[name, turns] = dataclasses.replace(
                            row, stored=store_bytes(store) - before
                        )
            # The hand-written loop as a person writes it: the plain pydantic converter.
            async with plain.worker(workflows=[HandWrittenLoop], tools=[lookup]):
                for turns in sizes:
                    if turns <= args.hand_written_up_to:
                        rows["hand-written", turns] = await run_hand_written(plain, turns)

    print("stored history bytes per model call, every run of the chain (HistoryEvent.ByteSize())")
    print(
        "| system | turns | model calls | runs | B / call | largest run | last request B "
        "| payload store |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for name in [*systems, "hand-written"]:
        for turns in sizes:
            row = rows.get((name, turns))
            if row is None:
                print(f"| {name} | {turns:,} | not run (one run past 50 MB) | | | | | |")
                continue
            print(
                f"| {name} | {turns:,} | {row.calls:,} | {row.runs} | {row.total / row.calls:,.0f} "
                f"| {row.largest / 1024:,.0f} KB | {row.last_request:,} "
                f"| {row.stored / 1024:,.0f} KB |"
            )
    small = 30 if 30 in sizes else sizes[0]
    for name in systems:
        lo, hi = rows[name, small], rows[name, sizes[-1]]
        growth = (hi.total / hi.calls) / (lo.total / lo.calls)
        print(
            f"{name}: B / call at {sizes[-1]:,} turns is {growth:.2f}x that at {small}; "
            f"last request {hi.last_request / lo.last_request:.2f}x; largest "
            f"run {max(r.largest for (n, _), r in rows.items() if n == name) / 1024:,.0f} KB"
        )


if __name__ == "__main__":
    asyncio.run(main())
