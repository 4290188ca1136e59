"""Completions per second: 50 concurrent plans, PlanExecuteWorkflow vs hand-written.

    python -m bench.throughput_bench [--workflows 50] [--steps 5] [--reps 3]

One dev server, the scripted model (no delay) and one in-process worker that runs
both workflows. Each repetition starts `--workflows` plans of `--steps` steps at
once, first of one kind and then of the other (the order alternates), and takes
the time from the first start to the last result. Printed: completions per second
for each repetition, their median, and durafact's median over the hand-written
one's (the goal is at least 0.9).
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
import uuid

from bench._common import Stack, dev_stack
from bench.handwritten import HandWritten
from durafact._recipes import Goal, PlanExecuteWorkflow
from durafact.testing import Call

GOAL = "Write a short briefing on durable execution for LLM agents."
KINDS = ("durafact", "hand-written")


def scripted(steps: int):
    def reply(call: Call) -> str | dict:
        if call.schema_name == "Plan":
            return {"steps": [f"Cover part {i + 1} of the briefing." for i in range(steps)]}
        return f"Offline answer to: {call.last_user[:80]}"

    return reply


async def burst(stack: Stack, kind: str, workflows: int, steps: int) -> float:
    """Completions per second of `workflows` plans started together."""
    run = PlanExecuteWorkflow.run if kind == "durafact" else HandWritten.run
    started = time.perf_counter()
    await asyncio.gather(
        *(
            stack.client.execute_workflow(
                run,
                Goal(text=GOAL, max_steps=steps),
                id=f"tp-{kind}-{uuid.uuid4().hex[:8]}",
                task_queue=stack.settings.task_queue,
            )
            for _ in range(workflows)
        )
    )
    return workflows / (time.perf_counter() - started)


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workflows", type=int, default=50)
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--reps", type=int, default=3)
    args = parser.parse_args()
    rates: dict[str, list[float]] = {kind: [] for kind in KINDS}
    async with (
        dev_stack(scripted(args.steps)) as stack,
        stack.worker(workflows=[HandWritten]),
    ):
        await burst(stack, "durafact", 5, args.steps)  # warm-up, not counted
        await burst(stack, "hand-written", 5, args.steps)
        for rep in range(args.reps):
            for kind in KINDS if rep % 2 == 0 else KINDS[::-1]:
                rates[kind].append(await burst(stack, kind, args.workflows, args.steps))
    print(f"{args.workflows} concurrent plans of {args.steps} steps, completions per second")
    print("| system | each repetition | median |")
    print("|---|---|---|")
    for kind in KINDS:
        each = ", ".join(f"{rate:.1f}" for rate in rates[kind])
        print(f"| {kind} | {each} | {statistics.median(rates[kind]):.1f} |")
    ratio = statistics.median(rates["durafact"]) / statistics.median(rates["hand-written"])
    print(f"durafact / hand-written: {ratio:.2f}")


if __name__ == "__main__":
    asyncio.run(main())
