"""What every bench shares: a dev server, the scripted model and a worker, in-process.

async with dev_stack(reply) as stack:
    async with stack.worker():
        await stack.client.execute_workflow(..., task_queue=stack.settings.task_queue)
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass

from temporalio.client import Client
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import Worker

import workflows
from cli.embedded import DEV_SERVER_TUNING, temporal_binary
from cli.settings import Settings
from cli.worker import build_worker
from tests.scripted_model import Reply, ScriptedModel


@dataclass
class Stack:
    client: Client
    settings: Settings  # its task queue is fresh for every stack
    model: ScriptedModel

    def worker(self, extra_workflows: Sequence[type] = ()) -> AbstractAsyncContextManager[Worker]:
        """The worker `worker.py` runs, in this process, on this stack's queue."""
        return build_worker(self.client, self.settings, extra_workflows=extra_workflows)


@asynccontextmanager
async def dev_stack(reply: Reply) -> AsyncIterator[Stack]:
    """A real dev server (in memory, with `DEV_SERVER_TUNING`) and the scripted model
    answering with `reply` (no delay); both are stopped on exit."""
    model = ScriptedModel().start()
    model.reply(reply)
    try:
        env = await WorkflowEnvironment.start_local(
            dev_server_existing_path=str(temporal_binary()),
            search_attributes=workflows.SEARCH_ATTRIBUTES,
            data_converter=pydantic_data_converter,
            dev_server_extra_args=list(DEV_SERVER_TUNING),
        )
    except BaseException:
        model.stop()
        raise
    try:
        settings = Settings(
            openai_base_url=model.url,
            openai_api_key="bench",
            model="scripted",
            task_queue=f"bench-{uuid.uuid4().hex[:8]}",
        )
        yield Stack(env.client, settings, model)
    finally:
        await env.shutdown()
        model.stop()
