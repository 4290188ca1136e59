"""What every bench shares: a dev server, the scripted model and a worker, in-process.

With a Temporal address configured (TEMPORAL_ADDRESS, TEMPORAL_NAMESPACE, API key,
TLS or a temporal.toml profile, as for the starter and the worker) the bench runs
there instead of starting a dev server, after making sure the namespace has
durafact's search attributes (DURAFACT_REGISTER_SEARCH_ATTRIBUTES=0: check only).

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
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import Worker, WorkflowRunner

from durafact._activities.tools import Tool
from durafact._runtime.connection import connect
from durafact._runtime.search_attributes import ensure_search_attributes, may_register
from durafact._runtime.settings import Settings
from durafact._runtime.worker import build_worker
from durafact.testing import Reply, ScriptedModel, start_dev_server


@dataclass
class Stack:
    client: Client
    settings: Settings  # its task queue is fresh for every stack
    model: ScriptedModel

    def worker(
        self,
        workflows: Sequence[type] = (),
        tools: Sequence[Tool] = (),
        workflow_runner: WorkflowRunner | None = None,
    ) -> AbstractAsyncContextManager[Worker]:
        """The worker `durafact-worker` runs, in this process, on this stack's queue."""
        return build_worker(
            self.client,
            self.settings,
            workflows=workflows,
            tools=tools,
            workflow_runner=workflow_runner,
        )


@asynccontextmanager
async def dev_stack(reply: Reply) -> AsyncIterator[Stack]:
    """A real dev server (in memory, with `DEV_SERVER_TUNING`), or the configured
    Temporal, and the scripted model answering with `reply` (no delay); what this
    starts is stopped on exit."""
    configured = Settings.from_env()
    model = ScriptedModel().start()
    model.reply(reply)
    env: WorkflowEnvironment | None = None
    try:
        if configured.temporal_address_explicit:
            client = await connect(configured)
            await ensure_search_attributes(client, register=may_register())
        else:
            env = await start_dev_server()
            client = env.client
        settings = Settings(
            openai_base_url=model.url,
            openai_api_key="bench",
            model="scripted",
            task_queue=f"bench-{uuid.uuid4().hex[:8]}",
        )
        yield Stack(client, settings, model)
    finally:
        if env is not None:
            await env.shutdown()
        model.stop()
