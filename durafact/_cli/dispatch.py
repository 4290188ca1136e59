"""What each command does once its arguments are read (durafact/_cli/arguments.py):
the checks that need the registry or the workflows' models, then a client, then the
command's own module. A runtime error (the embedded stack, the settings) is one line.

With no Temporal address configured and nothing answering on localhost:7233, the
recipe commands, `status` and `result` first start the embedded stack (`up`): the
Temporal dev server with its Web UI, the local model unless OPENAI_BASE_URL/
OPENAI_API_KEY name another one, and a worker (which runs the same recipes modules).
"""

from __future__ import annotations

import argparse
import os
from typing import Any

from durafact._cli.arguments import LAUNCH_COMMANDS, MAX_LIMIT
from durafact._cli.artifacts import artifacts
from durafact._cli.budget_options import budget_given, with_budget
from durafact._cli.chat import chat, check_chat_args
from durafact._cli.commands import (
    approve,
    cancel,
    check_new_limits,
    corrections,
    decide,
    pending,
    result,
    status,
)
from durafact._cli.endpoint_options import endpoints_given, with_endpoints
from durafact._cli.launch import check_sendable, launch_of_type, start
from durafact._cli.listing import amount, list_runs, name_filter
from durafact._cli.output import Failed, note, say
from durafact._cli.recipe_commands import launch_of
from durafact._cli.registered import refuse_unknown_tools
from durafact._cli.resume import resume
from durafact._cli.serve import check_serve_args, listening, serve
from durafact._cli.steering import steer
from durafact._core.steer import note_problem
from durafact._core.tools import ToolListRequest
from durafact._runtime.connection import connect_ready
from durafact._runtime.registry import (
    ENV_VAR,
    RegistrationError,
    Registry,
    load_registry,
    recipe_modules,
)
from durafact._runtime.settings import Settings, SettingsError


async def dispatch(args: argparse.Namespace) -> int:
    """Run the command `args` name; its exit code."""
    try:
        return await run_command(args)
    except SettingsError as exc:  # the embedded stack's EmbeddedError too
        raise Failed(str(exc)) from None


async def run_command(args: argparse.Namespace) -> int:
    if args.command == "up":
        registry_of(args)
        return await up()
    if args.command == "down":
        from durafact._local import embedded

        embedded.down(embedded.Embedded.from_env(), say)
        return 0
    if args.command in LAUNCH_COMMANDS:
        registry = registry_of(args)
        if args.command == "start":
            launch = launch_of_type(registry, args.type, args.input)
        else:
            launch = launch_of(args, registry)
        launch = with_budget(launch, budget_given(args))
        launch = with_endpoints(launch, endpoints_given(args))
        workflow_id = launch.workflow_id(args.id)
        check_sendable(launch)
        client, settings = await connect()
        if args.command == "react":
            asked = launch.args[0]
            needed = ToolListRequest(tools=asked.tools, mcp_servers=asked.mcp_servers)
            await refuse_unknown_tools(client, settings.task_queue, needed)
        return await start(
            client, settings, launch, workflow_id, args.no_wait, args.json, args.model_deadline
        )
    if args.command == "serve":
        registry = registry_of(args)
        serving = check_serve_args(args.host, args.port, args.allow_host)
        sock = listening(serving.host, serving.port)
        client, settings = await connect(console=False)  # this command is the console
        return await serve(client, settings, registry, serving, sock)
    if args.command == "chat":
        check_chat_args(args)
        client, settings = await connect()
        return await chat(client, settings, args)
    if args.command == "list":
        filters = (
            name_filter(args.recipe, "--recipe"),
            name_filter(args.status, "--status"),
            amount(args.over_cost, "--over-cost"),
        )
        if not 1 <= args.limit <= MAX_LIMIT:
            raise Failed(f"--limit {args.limit}: from 1 to {MAX_LIMIT}", code=2)
        client, settings = await connect()
        return await list_runs(client, *filters, args.limit, args.json)
    if args.command == "steer" and (problem := note_problem(args.note)):
        raise Failed(problem, code=2)
    changes = corrections(args.set) if args.command == "approve" else {}
    if changes and not args.reject:
        check_new_limits(changes)
    registry = registry_of(args) if args.command in ("result", "resume") else None
    client, settings = await connect()
    if args.command == "pending":
        return await pending(client, args.json)
    if args.command == "approve":
        return await approve(client, args.id, args.reject, args.reason, changes, args.remember)
    if args.command == "decide":
        return await decide(
            client,
            settings,
            args.id,
            args.question_id,
            args.approve,
            args.reason,
            args.remember,
        )
    if args.command == "status":
        return await status(client, settings, args.id)
    if args.command == "artifacts":
        return await artifacts(client, args.id, args.json, args.run)
    if args.command == "cancel":
        return await cancel(client, args.id, args.reason, args.no_wait)
    if args.command == "steer":
        return await steer(client, args.id, args.note, args.wait)
    assert registry is not None
    if args.command == "resume":
        return await resume(client, settings, registry, args.id, args.no_wait, args.json)
    return await result(client, settings, registry, args.id, args.json)


def registry_of(args: argparse.Namespace) -> Registry:
    """The registered recipes, or a one-line reason; the modules named here are passed
    on (DURAFACT_RECIPES) to an embedded worker this command starts."""
    modules = recipe_modules(args.recipes)
    try:
        registry = load_registry(modules)
    except RegistrationError as exc:
        raise Failed(str(exc), code=2) from None
    if modules:
        os.environ[ENV_VAR] = ",".join(modules)
    return registry


# --- connecting, with the embedded default ---------------------------------------------


async def connect(console: bool = True) -> tuple[Any, Settings]:
    """A client for the configured server, on a namespace ready for durafact workflows;
    the embedded stack starts first when no address is configured
    (durafact/_local/embedded.py), with its console unless `console` is False. A
    SettingsError is one line, as `dispatch` says it."""
    settings = Settings.from_env()
    if settings.temporal_address_explicit:  # a server of one's own: no embedded stack
        return await connect_ready(settings, note), settings
    # Imported only here: a library user on their own cluster may lack the `local` extra.
    from durafact._local.embedded import open_client

    return await open_client(note, console=console)


async def up() -> int:
    from durafact._local import embedded

    await embedded.up(embedded.Embedded.from_env(), Settings.from_env(), say)
    return 0
