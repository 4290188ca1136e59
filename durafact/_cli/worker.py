"""Run every registered durafact workflow and activity on the task queue.

    durafact-worker [--recipes MODULE[,MODULE...]] [--mcp NAME=COMMAND|URL] ...
                                                    (in a checkout: durafact-worker)

A worker with `DurafactPlugin` (durafact/_runtime/plugin.py) on the task queue
DURAFACT_TASK_QUEUE: the built-in recipes, the recipes modules named by `--recipes`
(repeatable) and DURAFACT_RECIPES (comma-separated), and those of installed
distributions' entry points in the group `durafact.recipes`
(durafact/_runtime/registry.py), with the tools of the MCP servers named by `--mcp`
(repeatable) and DURAFACT_MCP (`NAME=...;NAME=...`; durafact/_activities/mcp.py). Everything
else the plugin reads from the environment: the model endpoints, the payload keys and
store, the price table (DURAFACT_PRICES). With no model endpoint configured
(OPENAI_BASE_URL, OPENAI_API_KEY), the worker uses the embedded stack's local model
when `durafact up` runs one, and logs it, as a worker of your own with the plugin does;
with neither, it exits 2 with one line naming the fix. Temporal is reached through
`temporalio.envconfig` (TEMPORAL_ADDRESS, a profile), else at
`localhost:$DURAFACT_TEMPORAL_PORT` (7233). A registration, MCP or endpoint
configuration mistake is one line and exit code 2, before connecting; so is an unusable
profile, payload key or store, or price table, with exit code 1. SIGINT or SIGTERM
stops polling, lets running activities finish (up to the graceful timeout), closes the
MCP servers (ending their processes) and exits 0.

`--deployment NAME --build-id ID` (DURAFACT_DEPLOYMENT, DURAFACT_BUILD_ID) make the
worker the version NAME.ID of a Temporal worker deployment
(durafact/_runtime/versioning.py): it takes new runs once that version is the
deployment's current one, and keeps the runs that started on it; one option without the
other is one line and exit code 2.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import signal
import sys
from collections.abc import Sequence
from typing import NoReturn

from durafact._activities.mcp import McpConfigError, McpServer, close_servers, configured_servers
from durafact._cli.output import exit_now
from durafact._core.redaction import redact_url
from durafact._runtime.connection import connect
from durafact._runtime.logs import configure_logging
from durafact._runtime.plugin import DurafactPlugin, NoModelEndpoint
from durafact._runtime.registry import RegistrationError, recipe_modules
from durafact._runtime.settings import Settings, SettingsError
from durafact._runtime.worker import worker_for

log = logging.getLogger("durafact.worker")


def parser() -> argparse.ArgumentParser:
    top = argparse.ArgumentParser(prog="durafact-worker", description=__doc__.splitlines()[0])
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
    top.add_argument(
        "--deployment",
        metavar="NAME",
        help="the worker deployment this worker is a version of, with --build-id: runs "
        "start on the deployment's current version and finish on it (also "
        "DURAFACT_DEPLOYMENT)",
    )
    top.add_argument(
        "--build-id",
        metavar="ID",
        help="the version of this worker's code in --deployment (also DURAFACT_BUILD_ID)",
    )
    return top


def describe(plugin: DurafactPlugin, servers: list[McpServer]) -> list[str]:
    """What the worker runs, for its log; never a credential."""
    registry, keys = plugin.registry, plugin.keys
    modules = ", ".join(registry.modules)
    lines = [
        f"recipes: {', '.join(registry.names())} (from {modules})",
        f"tools: {', '.join(sorted(registry.tools)) or 'none'}",
        "payloads: "
        + (
            f"encrypted with key {keys.newest} (decrypts {', '.join(keys.ids)})"
            if keys
            else "not encrypted (no DURAFACT_KEYS)"
        ),
        f"large payloads: {plugin.payloads.describe()} (DURAFACT_PAYLOADS)",
        "prices: "
        + (
            f"{len(prices.models)} model(s) in {prices.currency}"
            if (prices := plugin.prices)
            else "none (no DURAFACT_PRICES): every cost is unknown"
        ),
    ]
    if version := plugin.deployment:
        name, build = version.deployment_name, version.build_id
        moving = [r.name for r in registry.workflows.values() if r.upgrade_on_continue_as_new]
        lines += [
            f"deployment {name}, build {build}: a run starts on the deployment's current "
            "version and stays on it (make this one current: temporal worker deployment "
            f"set-current-version --deployment-name {name} --build-id {build})",
            "  at continue-as-new onto the current version: " + (", ".join(moving) or "none"),
        ]
    for endpoint in plugin.endpoints.values():
        key = "with a key" if endpoint.api_key else "no key"
        model = f", model {endpoint.model}" if endpoint.model else ""
        lines.append(f"endpoint {endpoint.name}: {redact_url(endpoint.base_url)} ({key}{model})")
    for server in servers:
        lines.append(f"MCP server {server.name}: {server.target} (tools as {server.name}__TOOL)")
    return lines


async def main(argv: Sequence[str] | None = None) -> None:
    args = parser().parse_args(argv)
    try:
        servers = list(configured_servers(args.mcp, os.environ.get("DURAFACT_MCP")).values())
        plugin = DurafactPlugin(
            recipes=recipe_modules(args.recipes),
            mcp=servers,
            deployment=args.deployment,
            build_id=args.build_id,
        )
        plugin.registry  # noqa: B018 - a registration mistake is one line, before connecting
        settings = Settings.from_env()  # TEMPORAL_* and temporal.toml profiles
        # The configured endpoint, else the embedded stack's local model, as for a
        # worker of your own (DurafactPlugin).
        plugin.check_model_endpoint()
    except (RegistrationError, McpConfigError, ValueError, NoModelEndpoint) as exc:
        print(f"worker: {exc}", file=sys.stderr)
        sys.exit(2)
    except SettingsError as exc:  # a bad profile, unusable payload keys, store or prices
        exit_now(f"worker: {exc}")
    configure_logging()
    try:
        client = await connect(settings, worker=True)
    except SettingsError as exc:  # one line: no server
        exit_now(f"worker: {exc}")
    worker = worker_for(client, settings, plugin)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    log.info(
        "worker polling %s on %s (namespace %s, model %s)",
        settings.task_queue,
        settings.temporal_address,
        settings.temporal_namespace,
        plugin.model,
    )
    if (default := plugin.endpoints["default"]).origin == "durafact up":
        log.info(
            "no model endpoint configured: using the embedded local model at %s",
            default.base_url,
        )
    for line in describe(plugin, servers):
        log.info("%s", line)
    running = asyncio.create_task(worker.run())
    stopping = asyncio.create_task(stop.wait())
    await asyncio.wait({running, stopping}, return_when=asyncio.FIRST_COMPLETED)
    if running.done():  # it refused to start: a namespace without the search attributes
        stopping.cancel()
        try:
            running.result()
        except SettingsError as exc:
            await close_servers(servers)
            exit_now(f"worker: {exc}")
    try:
        log.info("stopping: finishing running activities")
        await worker.shutdown()
        await running
    finally:
        await close_servers(servers)  # and their stdio processes
    log.info("worker stopped")


def run() -> NoReturn:
    """The console script `durafact-worker` and `durafact-worker`."""
    try:
        asyncio.run(main())
    except RuntimeError as exc:  # e.g. the server cannot be reached
        exit_now(f"worker: {exc}")
    exit_now(None, 0)  # a clean stop, without the finalization that can abort


if __name__ == "__main__":
    run()
