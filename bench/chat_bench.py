"""Chat: history per run at the continue-as-new threshold, and time to the first token.

    python -m bench.chat_bench [--messages 500] [--local 5]

Part one sends `--messages` messages through `send` to one ChatWorkflow with its
default settings (rolling digest, continue-as-new at the server's suggestion or
10,000 events / 10 MB), on the scripted model with no delay, and prints every run
of the chain: its events, its history bytes (sum of HistoryEvent.ByteSize()) and
the messages it answered. Part two starts the local model (the demo's model), opens
a chat with streaming on and sends `--local` messages one after another: for each,
the time from `send` to the first streamed `tokens` item and to the reply.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from temporalio.api.enums.v1 import EventType
from temporalio.client import Client
from temporalio.contrib.workflow_streams import WorkflowStreamClient

from bench._common import dev_stack
from durafact._core.llm import TextChunk
from durafact._core.memory import ChatLine, Digest, Memory
from durafact._recipes.chat import (
    REMEMBERED_REPLIES,
    TOKENS_TOPIC,
    ChatCarry,
    ChatInput,
    ChatReply,
    ChatSend,
    ChatWorkflow,
)
from durafact.testing import Call
from tests.helpers import start_local_model

QUESTIONS = (
    "What should I pack for three days of hiking?",
    "Which of those can I leave out if it does not rain?",
    "How heavy would that be?",
    "Name one thing people forget.",
    "Thanks. Summarize the list in one line.",
)


def echo(call: Call) -> str:
    return f"noted: {call.last_user[:200]}"


async def runs_of(client: Client, workflow_id: str, first_run: str) -> list[tuple[int, int, int]]:
    """(events, history bytes, messages answered) for each run of a continue-as-new chain."""
    rows, run_id = [], first_run
    while run_id:
        history = await client.get_workflow_handle(workflow_id, run_id=run_id).fetch_history()
        sends = sum(
            1
            for e in history.events
            if e.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_UPDATE_COMPLETED
        )
        size = sum(e.ByteSize() for e in history.events)
        rows.append((len(history.events), size, sends))
        last = history.events[-1]
        continued = last.workflow_execution_continued_as_new_event_attributes
        run_id = (
            continued.new_execution_run_id
            if last.HasField("workflow_execution_continued_as_new_event_attributes")
            else ""
        )
    return rows


async def continue_as_new_part(messages: int) -> None:
    async with dev_stack(echo) as stack, stack.worker():
        handle = await stack.client.start_workflow(
            ChatWorkflow.run,
            ChatInput(stream=False),
            id=f"chat-bench-{uuid.uuid4().hex[:8]}",
            task_queue=stack.settings.task_queue,
        )
        started = time.monotonic()
        for n in range(messages):
            await handle.execute_update(
                ChatWorkflow.send,
                ChatSend(text=f"message {n}: fact {n * 7}"),
                result_type=ChatReply,
            )
        elapsed = time.monotonic() - started
        rows = await runs_of(stack.client, handle.id, handle.result_run_id or "")
        await handle.terminate("bench done")
    print(f"{messages} messages through `send` in {elapsed:.0f} s ({messages / elapsed:.1f}/s)")
    print("| run | events | history bytes | messages answered | ended |")
    print("|---|---|---|---|---|")
    for k, (events, size, sends) in enumerate(rows):
        ended = "still open (the bench ends it)" if k == len(rows) - 1 else "continued as new"
        print(f"| {k} | {events:,} | {size:,} | {sends} | {ended} |")


@contextmanager
def local_model() -> Iterator[str]:
    """The local model server in a subprocess (its log in a temporary file): its /v1 URL."""
    with tempfile.TemporaryDirectory() as folder:
        try:
            process, url = start_local_model(Path(folder) / "local_model.log")
        except RuntimeError as exc:
            hint = "is the `local` extra installed?"
            raise SystemExit(f"the local model did not start ({hint}): {exc}") from None
        try:
            yield url
        finally:
            process.terminate()
            process.wait(timeout=15)


async def first_token_part(count: int) -> None:
    with local_model() as url:
        async with dev_stack(echo) as stack:
            stack.settings = stack.settings.model_copy(
                update={"openai_base_url": url, "model": "smollm2-135m-instruct"}
            )
            async with stack.worker():
                handle = await stack.client.start_workflow(
                    ChatWorkflow.run,
                    ChatInput(),
                    id=f"chat-bench-{uuid.uuid4().hex[:8]}",
                    task_queue=stack.settings.task_queue,
                )
                stream = WorkflowStreamClient.create(stack.client, handle.id)
                firsts, wholes = [], []
                for n in range(count):
                    key = f"m{n}"
                    first = asyncio.get_running_loop().create_future()

                    async def watch(key: str = key, first: asyncio.Future = first) -> None:
                        async for item in stream.subscribe([TOKENS_TOPIC], result_type=TextChunk):
                            if item.data.key == key:
                                first.set_result(time.monotonic())
                                return

                    watcher = asyncio.create_task(watch())
                    await asyncio.sleep(0.2)  # the subscription's first poll is in
                    sent = time.monotonic()
                    await handle.execute_update(
                        ChatWorkflow.send,
                        ChatSend(text=QUESTIONS[n % len(QUESTIONS)], id=key),
                        result_type=ChatReply,
                    )
                    wholes.append(time.monotonic() - sent)
                    firsts.append(await asyncio.wait_for(first, timeout=30) - sent)
                    watcher.cancel()
                await handle.terminate("bench done")
    print(f"local model, {count} messages with streaming on (seconds from `send`):")
    print("| | median | min | max |")
    print("|---|---|---|---|")
    for label, values in (("first streamed token", firsts), ("whole reply", wholes)):
        print(
            f"| {label} | {statistics.median(values):.2f} | {min(values):.2f} | {max(values):.2f} |"
        )


def carry_part(counts: list[int]) -> None:
    """The size of what a chat carries across continue-as-new after N messages: the
    recent replies (REMEMBERED_REPLIES texts) and the index of every id answered (12
    bytes each), built as the workflow builds them, with the default memory policy's
    bound window and a digest of 2,000 characters."""
    print("| messages answered | carry (JSON bytes) | of it, the answered-id index |")
    print("|---|---|---|")
    for count in counts:
        carry = ChatCarry(
            memory=Memory(
                window=[ChatLine(role="user", content=f"message {n}", seq=n) for n in range(12)],
                digest=Digest(text="x" * 2000, version=count // 10),
            ),
            turns=count,
            model_calls=count,
        )
        for n in range(count):
            key, seq = str(uuid.UUID(int=n)), 2 * n
            carry.answered.add(key, seq)
            if n >= count - REMEMBERED_REPLIES:
                carry.replies[key] = ChatReply(id=key, seq=seq, text=f"reply {n} " * 10, run=0)
        size = len(carry.model_dump_json())
        index = len(carry.answered.model_dump_json())
        print(f"| {count:,} | {size:,} | {index:,} |")


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=500)
    parser.add_argument("--local", type=int, default=5, help="messages to the local model")
    parser.add_argument("--carry", type=int, nargs="*", default=[100, 1_000, 10_000, 100_000])
    args = parser.parse_args()
    carry_part(args.carry)
    await continue_as_new_part(args.messages)
    if args.local:
        await first_token_part(args.local)


if __name__ == "__main__":
    asyncio.run(main())
