"""Run every registered durafact workflow and activity on the task queue.

    python worker.py [--recipes MODULE[,MODULE...]] [--mcp NAME=COMMAND|URL] ...
                                                            (installed: durafact-worker)

Runs the built-in recipes, the recipes modules named by `--recipes` (repeatable) and
DURAFACT_RECIPES (comma-separated), and those of installed distributions' entry
points in the group `durafact.recipes` (see cli/registry.py), with the tools of the
MCP servers named by `--mcp` (repeatable) and DURAFACT_MCP (`NAME=...;NAME=...`; see
activities/mcp.py). Reads TEMPORAL_ADDRESS, TEMPORAL_NAMESPACE, DURAFACT_TASK_QUEUE,
OPENAI_BASE_URL, OPENAI_API_KEY and DURAFACT_MODEL, and the model and embedding
endpoints workflows may name, DURAFACT_ENDPOINT_<NAME>=URL with DURAFACT_ENDPOINT_<NAME>_KEY
(see cli/endpoints.py), the payload encryption keys, DURAFACT_KEYS or DURAFACT_KEYS_FILE
(see cli/codec.py), and where large payloads go, DURAFACT_PAYLOADS and
DURAFACT_PAYLOAD_THRESHOLD (see cli/payloads.py). A registration, MCP or endpoint
configuration mistake is one line and exit code 2, before connecting. SIGINT or SIGTERM
stops polling, lets running activities finish (up to the graceful timeout), closes the MCP
servers (ending their processes) and exits 0.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import signal
import sys
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import asynccontextmanager
from datetime import timedelta
from typing import NoReturn

import openai
from pydantic import BaseModel
from temporalio.client import Client
from temporalio.worker import Worker
from temporalio.worker.workflow_sandbox import SandboxedWorkflowRunner, SandboxRestrictions

from activities import ModelActivities, SourceActivities
from activities.mcp import McpConfigError, close_servers, configured_servers
from activities.tools import Tool, ToolActivities, ToolCatalog, ToolProvider
from cli.connection import connect, exit_now, require_search_attributes
from cli.endpoints import configured_endpoints, endpoint_client
from cli.payloads import store_from_env
from cli.registry import (
    RegistrationError,
    Registry,
    builtin_registry,
    load_registry,
    recipe_modules,
)
from cli.settings import Settings, SettingsError
from durafact.sources import DEFAULT_ENDPOINT

log = logging.getLogger("durafact.worker")

# The sandbox re-imports a workflow's modules on every new run. For durafact's own
# packages that cost about 0.1 s of CPU per run (rebuilding every pydantic model);
# with 50 runs starting at once on 2 cores, first workflow tasks came close to
# Temporal's 10 s task timeout. `durafact` and `workflows` hold no module state a
# run writes, so they are shared instead; what the sandbox would have caught in
# them, tests/test_workflow_determinism.py checks statically, and replay tests
# check behaviour. A user's own workflow modules stay fully sandboxed.
WORKFLOW_RUNNER = SandboxedWorkflowRunner(
    restrictions=SandboxRestrictions.default.with_passthrough_modules("durafact", "workflows")
)


def openai_client(settings: Settings) -> openai.AsyncOpenAI:
    """The model client: no client-side retries, since Temporal owns them."""
    if not settings.openai_base_url and not settings.openai_api_key:
        raise SystemExit(
            "worker: set OPENAI_BASE_URL (any OpenAI-compatible server) or OPENAI_API_KEY"
        )
    return openai.AsyncOpenAI(
        base_url=settings.openai_base_url,
        # Local OpenAI-compatible servers accept any key; the client insists on one.
        api_key=settings.openai_api_key or "unused",
        max_retries=0,
        timeout=openai.Timeout(90.0, connect=5.0),
    )


@asynccontextmanager
async def build_worker(
    client: Client,
    settings: Settings,
    registry: Registry | None = None,
    *,
    extra_workflows: Sequence[type] = (),
    output_models: Sequence[type[BaseModel]] = (),
    tools: Sequence[Tool] = (),
    tool_providers: Mapping[str, ToolProvider] | None = None,
) -> AsyncIterator[Worker]:
    """Run the registered workflows and every activity on the task queue while the
    block runs; on exit, stop the worker and close the model client it made.

    `registry` defaults to the built-ins; `extra_workflows`, `output_models` and
    `tools` add to it (a test's own recipe, the models its structured calls ask for,
    and the @tool functions its tool calls name). `tool_providers` are MCP servers by
    name; whoever made them closes them.
    """
    registry = (registry or builtin_registry()).add(
        extra_workflows, output_models, origin="build_worker", tools=tools
    )
    # The registered Python tools; the model activity shows their specs, call_tool runs them.
    catalog = ToolCatalog(registry.tools.values(), tool_providers)
    tool_activities = ToolActivities(catalog)
    llm = openai_client(settings)
    # Every endpoint a request or a source may name, `default` being the model client;
    # each client holds its own endpoint's key, and a name the worker lacks reaches nothing.
    named = {name: endpoint_client(e) for name, e in settings.endpoints.items()}
    models = ModelActivities(
        llm,
        client,
        settings.model,
        registry.output_models.values(),
        tools=catalog,
        endpoints=named,
    )
    sources = SourceActivities(endpoints={DEFAULT_ENDPOINT: llm, **named})
    worker = Worker(
        client,
        task_queue=settings.task_queue,
        workflows=registry.classes,
        activities=[
            models.request_model,
            sources.search_source,
            sources.resolve_ref,
            tool_activities.list_tools,
            tool_activities.call_tool,
        ],
        workflow_runner=WORKFLOW_RUNNER,
        graceful_shutdown_timeout=timedelta(seconds=10),
    )
    try:
        async with worker:
            yield worker
    finally:
        for endpoint in (llm, *named.values()):
            await endpoint.close()


def parser() -> argparse.ArgumentParser:
    top = argparse.ArgumentParser(prog="worker.py", description=__doc__.splitlines()[0])
    top.add_argument(
        "--recipes",
        action="append",
        default=[],
        metavar="MODULE[,MODULE...]",
        help="a recipes module to run besides the built-ins (repeatable; also DURAFACT_RECIPES)",
    )
    top.add_argument(
        "--mcp",
        action="append",
        default=[],
        metavar="NAME=COMMAND|URL",
        help="an MCP server whose tools workflows name as NAME__TOOL: a command run over "
        "stdio or an http(s) URL (streamable HTTP) (repeatable; also DURAFACT_MCP)",
    )
    return top


async def main(argv: Sequence[str] | None = None) -> None:
    args = parser().parse_args(argv)
    try:
        registry = load_registry(recipe_modules(args.recipes))
        mcp_servers = configured_servers(args.mcp, os.environ.get("DURAFACT_MCP"))
        endpoints = configured_endpoints(os.environ)  # EndpointError: a ValueError
        ToolCatalog(registry.tools.values(), mcp_servers)  # a name both a tool and a server
    except (RegistrationError, McpConfigError, ValueError) as exc:
        print(f"worker: {exc}", file=sys.stderr)
        sys.exit(2)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    try:
        settings = Settings.from_env()  # TEMPORAL_* and temporal.toml profiles
        client = await connect(settings)
        await require_search_attributes(client)  # its workflow tasks would fail without them
    except SettingsError as exc:  # one line: a bad profile, no server, a namespace not ready
        exit_now(f"worker: {exc}")
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    log.info(
        "worker polling %s on %s (namespace %s, model %s at %s)",
        settings.task_queue,
        settings.temporal_address,
        settings.temporal_namespace,
        settings.model,
        settings.openai_base_url or "api.openai.com",
    )
    log.info("recipes: %s (from %s)", ", ".join(registry.names()), ", ".join(registry.modules))
    log.info("tools: %s", ", ".join(sorted(registry.tools)) or "none")
    keyring = getattr(client.data_converter.payload_codec, "keyring", None)  # cli/codec.py
    log.info(
        "payloads: %s",
        f"encrypted with key {keyring.newest} (decrypts {', '.join(keyring.ids)})"
        if keyring
        else "not encrypted (no DURAFACT_KEYS)",
    )
    log.info("large payloads: %s (DURAFACT_PAYLOADS)", store_from_env().describe())
    for endpoint in endpoints.values():
        log.info(
            "endpoint %s: %s (%s)",
            endpoint.name,
            endpoint.base_url or "api.openai.com",
            "with a key" if endpoint.api_key else "no key",
        )
    for server in mcp_servers.values():
        log.info("MCP server %s: %s (tools as %s__TOOL)", server.name, server.target, server.name)
    try:
        async with build_worker(client, settings, registry, tool_providers=mcp_servers):
            await stop.wait()
            log.info("stopping: finishing running activities")
    finally:
        await close_servers(mcp_servers.values())  # and their stdio processes
    log.info("worker stopped")


def run() -> NoReturn:
    """The console script `durafact-worker` and `python worker.py`."""
    try:
        asyncio.run(main())
    except RuntimeError as exc:  # e.g. the server cannot be reached
        exit_now(f"worker: {exc}")
    exit_now(None, 0)  # a clean stop, without the finalization that can abort


if __name__ == "__main__":
    run()
