"""Scale-out: completions per second of fifty plans with one and with three worker processes.

    python -m bench.scale_out_bench

One run starts a real dev server (in memory, tuned as the embedded one); for each
worker count it starts that many `python worker.py` processes on a fresh task queue,
each with a scripted model server of its own that answers at once
(tests/worker_processes.py), waits until they all poll, runs 2 plans per worker to warm
them up (sandbox imports on each worker's first workflow task), then starts fifty
`PlanExecuteWorkflow` runs at once (plan, three steps, final: 5 model activities and 7
workflow tasks each) and times from the first start to the last result. On a machine
with fewer cores than processes (the dev server, this process and the workers all
share them), more workers may not mean more throughput: this reports what it measures.
"""

from __future__ import annotations

import asyncio
import os
import time
import uuid

from temporalio.client import Client

from durafact._recipes import Goal, PlanExecuteWorkflow
from durafact._runtime.settings import Settings
from durafact.testing import default_reply, start_dev_server
from tests.worker_processes import worker_processes

WORKFLOWS = 50
WORKER_COUNTS = (1, 3)


async def run_plans(client: Client, queue: str, n: int, label: str) -> float:
    """Start n plans at once and wait for all of them: the seconds it took."""
    began = time.perf_counter()
    handles = [
        await client.start_workflow(
            PlanExecuteWorkflow.run,
            Goal(text=f"{label} plan {i}"),
            id=f"bench-scale-{label}-{i}-{uuid.uuid4().hex[:8]}",
            task_queue=queue,
        )
        for i in range(n)
    ]
    await asyncio.gather(*(handle.result() for handle in handles))
    return time.perf_counter() - began


async def measure(client: Client, workers: int) -> float:
    settings = Settings(
        task_queue=f"bench-scale-{uuid.uuid4().hex[:8]}",
        model="scripted",
    )
    async with worker_processes(client, settings, workers, default_reply):
        await run_plans(client, settings.task_queue, 2 * workers, "warm")
        return await run_plans(client, settings.task_queue, WORKFLOWS, "measured")


async def main() -> None:
    env = await start_dev_server()
    try:
        seconds = {n: await measure(env.client, n) for n in WORKER_COUNTS}
    finally:
        await env.shutdown()
    print()
    print(
        f"{WORKFLOWS} PlanExecuteWorkflow runs started at once (5 model calls each, the "
        f"scripted model answering at once), {os.cpu_count()} CPU core(s):"
    )
    print(f"  {'workers':>7} {'seconds':>8} {'completions/s':>14}")
    for n, s in seconds.items():
        print(f"  {n:>7} {s:>8.2f} {WORKFLOWS / s:>14.1f}")


if __name__ == "__main__":
    asyncio.run(main())
