"""A worker on the settings' task queue, assembled by `DurafactPlugin`: what
`durafact-worker` runs, and what the tests and benchmarks run in their own process."""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from datetime import timedelta

from pydantic import BaseModel
from temporalio.client import Client
from temporalio.worker import Worker, WorkflowRunner

from durafact._activities.mcp import McpServer
from durafact._activities.tools import Tool
from durafact._core.prices import Prices
from durafact._runtime.plugin import DurafactPlugin
from durafact._runtime.settings import Settings

# How long a stopping worker lets running activities finish.
GRACEFUL_SHUTDOWN = timedelta(seconds=10)


def worker_for(
    client: Client,
    settings: Settings,
    plugin: DurafactPlugin,
    workflow_runner: WorkflowRunner | None = None,
) -> Worker:
    """A worker on `settings.task_queue` with `plugin` (and a runner of its own, which
    the plugin extends with its pass-through when it is a sandbox)."""
    return Worker(
        client,
        task_queue=settings.task_queue,
        plugins=[plugin],
        graceful_shutdown_timeout=GRACEFUL_SHUTDOWN,
        workflow_runner=workflow_runner,
    )


@asynccontextmanager
async def build_worker(
    client: Client,
    settings: Settings,
    *,
    recipes: Sequence[str] = (),
    workflows: Sequence[type] = (),
    output_models: Sequence[type[BaseModel]] = (),
    tools: Sequence[Tool] = (),
    mcp: Sequence[str | McpServer] = (),
    prices: Prices | None = None,
    workflow_runner: WorkflowRunner | None = None,
    deployment: str | None = None,
    build_id: str | None = None,
) -> AsyncIterator[Worker]:
    """Run the built-ins, `recipes` modules, `workflows`, and every activity on the
    settings' task queue and model endpoints (priced by `prices`) while the block runs,
    as the version `build_id` of `deployment` when both are given. Nothing else is read
    from the environment: no DURAFACT_RECIPES, entry points, DURAFACT_MCP,
    DURAFACT_PRICES or DURAFACT_DEPLOYMENT."""
    plugin = DurafactPlugin(
        recipes=recipes,
        entry_points=False,
        workflows=workflows,
        output_models=output_models,
        tools=tools,
        mcp=mcp,
        endpoints=settings.all_endpoints(),
        model=settings.model,
        prices=prices,
        deployment=deployment,
        build_id=build_id,
        env={},
    )
    async with worker_for(client, settings, plugin, workflow_runner) as worker:
        yield worker
