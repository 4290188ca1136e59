"""The tool loop: ReActWorkflow vs a hand-written Temporal tool loop, history per model call.

    python -m bench.react_bench [--turns 3,10,30,100]

One run starts a real dev server, the scripted model (no delay) and an in-process
worker with one tool, `lookup`, that returns a fixed 500-character document. For
N turns the model asks for N lookups (text protocol), then answers. Both loops
make the same model and tool calls; the hand-written one sends the whole
conversation inline in every model activity's input, as a person writes it (and
as Temporal's OpenAI Agents plugin and Pydantic AI do), while durafact sends a
constant-size reference. Printed: history bytes per model call, their growth
from the smallest to the largest N, and the whole history at the largest N.
"""

from __future__ import annotations

import argparse
import asyncio
import uuid

from temporalio.api.enums.v1 import EventType
from temporalio.client import Client

from activities.tools import tool
from bench._common import dev_stack
from bench.handwritten import QUESTION, HandWrittenLoop
from durafact.testing import Call
from workflows import ReActInput, ReActWorkflow

TURNS = (3, 10, 30, 100)
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
        done = sum(1 for m in call.messages if m.get("role") == "assistant")
        if done < turns:
            return (
                f"Thought: I need part {done + 1} of the research.\n"
                f'Action: lookup\nAction Input: {{"query": "durable execution {done + 1}"}}'
            )
        return "Final Answer: The history is replayed and capped, so it must stay small."

    return reply


async def history_bytes(client: Client, workflow_id: str) -> tuple[int, int]:
    """(bytes of the whole history, model calls) for one finished run."""
    history = await client.get_workflow_handle(workflow_id).fetch_history()
    calls = sum(
        1
        for event in history.events
        if event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED
        and event.activity_task_scheduled_event_attributes.activity_type.name == "request_model"
    )
    return sum(event.ByteSize() for event in history.events), calls


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", default=",".join(map(str, TURNS)))
    sizes = [int(n) for n in parser.parse_args().turns.split(",")]
    rows: dict[tuple[str, int], tuple[int, int]] = {}
    async with (
        dev_stack(scripted(sizes[0])) as stack,
        stack.worker(workflows=[HandWrittenLoop], tools=[lookup]),
    ):
        for turns in sizes:
            stack.model.reply(scripted(turns))
            wid = f"react-bench-{uuid.uuid4().hex[:8]}"
            await stack.client.execute_workflow(
                ReActWorkflow.run,
                ReActInput(question=QUESTION, tools=["lookup"], max_turns=turns + 1, loop_limit=0),
                id=wid,
                task_queue=stack.settings.task_queue,
            )
            rows["durafact", turns] = await history_bytes(stack.client, wid)
            wid = f"hand-bench-{uuid.uuid4().hex[:8]}"
            await stack.client.execute_workflow(
                HandWrittenLoop.run, turns, id=wid, task_queue=stack.settings.task_queue
            )
            rows["hand-written", turns] = await history_bytes(stack.client, wid)

    print("history bytes per model call (sum of HistoryEvent.ByteSize() / model calls)")
    print(f"| system | {' | '.join(f'{n} turns' for n in sizes)} | {sizes[-1]} / {sizes[0]} |")
    print(f"|---|{'---|' * len(sizes)}---|")
    for kind in ("durafact", "hand-written"):
        per_call = [rows[kind, n][0] / rows[kind, n][1] for n in sizes]
        cells = " | ".join(f"{value:,.0f}" for value in per_call)
        print(f"| {kind} | {cells} | {per_call[-1] / per_call[0]:.2f} |")
    for kind in ("durafact", "hand-written"):
        total, calls = rows[kind, sizes[-1]]
        print(
            f"{kind}: {sizes[-1]} turns, {calls} model calls, whole history {total / 1024:,.0f} KB"
        )


if __name__ == "__main__":
    asyncio.run(main())
