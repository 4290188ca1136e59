"""Prefix reuse: how much of each model request repeats the previous request of its run,
byte for byte from the start: what an endpoint's prompt cache can serve again.

    python -m bench.prefix_bench [--n 10]

W1 is plan + N steps + finish (`PlanExecuteWorkflow` against bench/handwritten.py's
`HandWritten`), W2 a tool loop of N turns with a 500-character `lookup` observation each
(`ReActWorkflow`, text protocol, against `HandWrittenLoop`; and the native protocol,
which has no hand-written twin here). Both run on a real dev server and the scripted
model. A request counts as its messages, as JSON in the order sent (the tools, the
same on every call of a run, are left out). The ratio is, over every request of a run
but its first, the bytes of its longest common prefix with the previous request,
divided by its bytes; "of previous" divides the same by the previous requests' bytes.
A run whose every request sends all of the one before reaches 1.000 of previous, and
its ratio is then 1 minus the share of what each turn adds (a reply, an observation),
which no cache can hold.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import uuid
from collections.abc import Callable

from bench._common import dev_stack
from bench.handwritten import QUESTION, HandWritten, HandWrittenLoop
from bench.plan_execute_bench import GOAL, scripted_reply
from bench.react_bench import lookup, scripted
from durafact._recipes import Goal, PlanExecuteWorkflow, ReActInput, ReActWorkflow
from durafact.testing import Call, ToolCalls


def native(turns: int) -> Callable[[Call], str | ToolCalls]:
    """W2 in the native protocol: a `lookup` call until `turns` tool results, then text."""

    def reply(call: Call) -> str | ToolCalls:
        done = sum(1 for m in call.messages if m.get("role") == "tool")
        if done < turns:
            return ToolCalls([("lookup", {"query": f"durable execution {done + 1}"})])
        return "The history is replayed and capped, so it must stay small."

    return reply


def shared_prefix(a: bytes, b: bytes) -> int:
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n


def reuse(calls: list[Call]) -> tuple[int, int, int, int]:
    """(requests; bytes of every request but the first; of those, shared from the start
    with the request before; the bytes of the requests before)."""
    sent = [json.dumps(call.messages, ensure_ascii=False).encode() for call in calls]
    pairs = list(zip(sent, sent[1:], strict=False))
    shared = sum(shared_prefix(a, b) for a, b in pairs)
    return len(sent), sum(len(b) for _, b in pairs), shared, sum(len(a) for a, _ in pairs)


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=10, help="steps of W1, turns of W2 (default 10)")
    n = parser.parse_args().n
    replies: dict[str, Callable[[Call], object]] = {}

    def reply(call: Call) -> object:
        return replies[call.workflow_id](call)

    runs = {
        ("W1", "durafact"): (PlanExecuteWorkflow.run, Goal(text=GOAL, max_steps=n), scripted_reply),
        ("W1", "hand-written"): (HandWritten.run, Goal(text=GOAL, max_steps=n), scripted_reply),
        ("W2", "durafact"): (
            ReActWorkflow.run,
            ReActInput(question=QUESTION, tools=["lookup"], max_turns=n + 1, loop_limit=0),
            scripted(n),
        ),
        ("W2", "hand-written"): (HandWrittenLoop.run, n, scripted(n)),
        ("W2", "durafact, native"): (
            ReActWorkflow.run,
            ReActInput(
                question=QUESTION,
                tools=["lookup"],
                protocol="native",
                max_turns=n + 1,
                loop_limit=0,
            ),
            native(n),
        ),
    }
    rows = []
    async with (
        dev_stack(reply) as stack,
        stack.worker(workflows=[HandWritten, HandWrittenLoop], tools=[lookup]),
    ):
        for (workload, system), (run, arg, script) in runs.items():
            workflow_id = f"prefix-{uuid.uuid4().hex[:8]}"
            replies[workflow_id] = script
            await stack.client.execute_workflow(
                run, arg, id=workflow_id, task_queue=stack.settings.task_queue
            )
            calls = [call for call in stack.model.calls if call.workflow_id == workflow_id]
            rows.append((workload, system, *reuse(calls)))

    print(f"Prefix reuse at N = {n}: bytes of each request (its messages as JSON) shared from")
    print("the start with the run's previous request, over its size (ratio), and over the")
    print("previous request's size (of previous: 1.000 when each request sends all of the")
    print("one before), summed over every request but the first.")
    print("| workload | system | requests | bytes | shared | ratio | of previous |")
    print("|---|---|---|---|---|---|---|")
    for workload, system, requests, total, shared, before in rows:
        print(
            f"| {workload} | {system} | {requests} | {total:,} | {shared:,} "
            f"| {shared / total:.3f} | {shared / before:.3f} |"
        )


if __name__ == "__main__":
    asyncio.run(main())
