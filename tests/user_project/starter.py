"""This project's starter: its recipe, then durafact's PlanExecuteWorkflow, on its worker.

python starter.py
"""

import asyncio
import os
import uuid

from temporalio.client import Client

from durafact import DurafactPlugin, Goal, PlanExecuteWorkflow
from workflows import Trip, TripPlanner

ADDRESS = os.environ.get("TEMPORAL_ADDRESS", "localhost:7233")
TASK_QUEUE = os.environ.get("DURAFACT_TASK_QUEUE", "trips")


async def main() -> None:
    client = await Client.connect(ADDRESS, plugins=[DurafactPlugin()])
    trip = await client.execute_workflow(
        TripPlanner.run,
        Trip(text="Baltic coast", days=2),
        id=f"trip-{uuid.uuid4()}",
        task_queue=TASK_QUEUE,
    )
    plan = await client.execute_workflow(
        PlanExecuteWorkflow.run,
        Goal(text="Plan a weekend in Kraków"),
        id=f"plan-{uuid.uuid4()}",
        task_queue=TASK_QUEUE,
    )
    print(trip.days)
    print(plan.answer.text)


if __name__ == "__main__":
    asyncio.run(main())
