"""This app's worker: its own recipes (workflows/), activities and tools (activities/),
beside durafact's ready recipes, on the task queue `durafact` (DURAFACT_TASK_QUEUE) of
the Temporal server TEMPORAL_ADDRESS names (or a temporal.toml profile):

    python worker.py

It is what you copy into an app of your own; `durafact-worker` is the same worker with
every option on the command line. This app shares the queue `durafact` with the
embedded stack on purpose: `python starter.py up` (`make up`) starts the stack's worker
with these same recipes. A copy of it in an app of your own takes a queue of its own
(TASK_QUEUE below; docs/guides/your-worker.md), or the stack's worker, which lacks your
recipes, takes their tasks and fails them; the plugin warns of that as it starts."""

import asyncio
import os
import signal
from datetime import timedelta

from temporalio.client import Client
from temporalio.envconfig import ClientConfig
from temporalio.worker import Worker

from durafact import DurafactPlugin

TASK_QUEUE = os.environ.get("DURAFACT_TASK_QUEUE", "durafact")


async def main() -> None:
    config = ClientConfig.load_client_connect_config()  # TEMPORAL_* and temporal.toml
    config.setdefault("target_host", "localhost:7233")
    plugin = DurafactPlugin(recipes=["workflows", "activities"])
    client = await Client.connect(**config, plugins=[plugin])
    # Stop on Ctrl-C or SIGTERM (docker stop), letting the activities in flight finish.
    stop = asyncio.Event()
    for signum in (signal.SIGINT, signal.SIGTERM):
        asyncio.get_running_loop().add_signal_handler(signum, stop.set)
    # Model calls in flight may finish for this long: under docker-compose.yml's
    # stop_grace_period (2m), so a deploy does not turn them into retries.
    drain = timedelta(seconds=90)
    async with Worker(client, task_queue=TASK_QUEUE, graceful_shutdown_timeout=drain):
        await stop.wait()


if __name__ == "__main__":
    asyncio.run(main())
