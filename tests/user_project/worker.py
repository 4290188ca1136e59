"""This project's worker: its recipe and its activity beside durafact's
PlanExecuteWorkflow, with DurafactPlugin on a plain Temporal worker.

    python worker.py
"""

import asyncio
import os
import signal

from temporalio.client import Client
from temporalio.worker import Worker

from activities import forecast
from durafact import DurafactPlugin, PlanExecuteWorkflow
from workflows import Cities, TripPlanner

ADDRESS = os.environ.get("TEMPORAL_ADDRESS", "localhost:7233")
TASK_QUEUE = os.environ.get("DURAFACT_TASK_QUEUE", "trips")  # durafact's commands read it too


async def main() -> None:
    client = await Client.connect(ADDRESS, plugins=[DurafactPlugin()])
    worker = Worker(
        client,
        task_queue=TASK_QUEUE,
        workflows=[TripPlanner, PlanExecuteWorkflow],
        activities=[forecast],
        # Cities: the model its ctx.llm.structured call asks for.
        plugins=[DurafactPlugin(output_models=[Cities])],
    )
    stop = asyncio.Event()
    for signum in (signal.SIGINT, signal.SIGTERM):
        asyncio.get_running_loop().add_signal_handler(signum, stop.set)
    async with worker:
        await stop.wait()


if __name__ == "__main__":
    asyncio.run(main())
