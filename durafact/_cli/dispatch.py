"""What each command does once its arguments are read (durafact/_cli/arguments.py):
the checks that need the registry or the recipes' models, then a client, then the
command's own module, which presents an operation of the service layer
(durafact/_service/). A runtime error (the embedded stack, the settings) is one line.

With no Temporal address configured and nothing answering on localhost:7233, the
recipe commands, `status` and `result` first start the embedded stack (`up`): the
Temporal dev server with its Web UI, the local model unless OPENAI_BASE_URL/
OPENAI_API_KEY name another one, and a worker (which runs the same recipes modules).
"""

from __future__ import annotations

import argparse
import functools
import os
from collections.abc import Mapping
from typing import Any

from durafact._cli.arguments import MAX_LIMIT, values_of
from durafact._cli.artifacts import artifacts
from durafact._cli.budget_options import budget_given
from durafact._cli.chat import chat, check_chat_args
from durafact._cli.check import check
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
from durafact._cli.endpoint_options import endpoints_given
from durafact._cli.fork import fork, fork_edits
from durafact._cli.launch import launch_of_type, start
from durafact._cli.listing import amount, list_runs, name_filter
from durafact._cli.output import Failed, note, say
from durafact._cli.resume import resume
from durafact._cli.steering import steer
from durafact._core.steer import note_problem
from durafact._runtime.connection import connect_ready
from durafact._runtime.registry import (
    ENV_VAR,
    RegistrationError,
    Registry,
    load_registry,
    recipe_modules,
)
from durafact._runtime.settings import Settings, SettingsError
from durafact._service.inputs import check_sendable
from durafact._service.launch import (
    launch_of_command,
    tools_named,
    with_budget,
    with_endpoints,
)
from durafact._service.registration import refuse_unknown_tools


async def dispatch(args: argparse.Namespace, doors: Mapping[str, Any]) -> int:
    """Run the command `args` name; its exit code. `doors`: the other front doors this
    command line runs (`serve`), each by a function that imports it."""
    try:
        return await run_command(args, doors)
    except SettingsError as exc:  # the embedded stack's EmbeddedError too
        raise Failed(str(exc)) from None


async def run_command(args: argparse.Namespace, doors: Mapping[str, Any]) -> int:
    if args.command == "up":
        registry_of(args)
        return await up()
    if args.command == "key":
        from durafact._runtime.codec import CodecConfigError, new_key

        try:
            say(new_key(args.id))
        except CodecConfigError as exc:
            raise Failed(str(exc)) from None
        return 0
    if args.command == "down":
        from durafact._local import embedded

        embedded.down(embedded.Embedded.from_env(), say)
        return 0
    declared = getattr(args, "declared", None)  # a recipe's own command
    if args.command == "start" or declared is not None:
        registry = registry_of(args)
        if declared is None:
            launch = launch_of_type(registry, args.type, args.input)
        else:
            launch = launch_of_command(
                registry.commands()[declared.name], values_of(args, declared)
            )
        launch = with_budget(launch, budget_given(args))
        launch = with_endpoints(launch, endpoints_given(args))
        workflow_id = launch.workflow_id(args.id)
        check_sendable(launch.args)
        client, settings = await connect()
        needed = tools_named(launch) if declared is not None else None
        if needed is not None:
            await refuse_unknown_tools(client, settings.task_queue, needed)
        return await start(
            client, settings, launch, workflow_id, args.no_wait, args.json, args.model_deadline
        )
    if args.command == "serve":
        if "serve" not in doors:
            raise Failed("serve: this entry point runs no HTTP API; `python -m durafact` does")
        serve = doors["serve"]()
        return await serve(
            args.host,
            args.port,
            args.allow_host,
            registry_of(args),
            functools.partial(connect, console=False),  # this command is the console
            say,
        )
    if args.command == "chat":
        check_chat_args(args)
        registry = registry_of(args)
        client, settings = await connect()
        return await chat(client, settings, registry, args)
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
    if args.command == "check":
        return await check(args, connect)
    if args.command == "eval":
        from durafact._cli.evaluate import eval_runs

        return await eval_runs(args, connect)
    if args.command == "steer" and (problem := note_problem(args.note)):
        raise Failed(problem, code=2)
    if args.command == "fork":
        edits = fork_edits(args.set, args.edit, args.drop)
        registry = registry_of(args)
        client, settings = await connect()
        return await fork(client, settings, registry, args, edits)
    changes = corrections(args.set) if args.command == "approve" else {}
    if changes and not args.reject:
        check_new_limits(changes)
    # What these commands do depends on what the recipe declares.
    recipes = args.command in ("approve", "steer", "result", "resume")
    registry = registry_of(args) if recipes else None
    client, settings = await connect()
    if args.command == "pending":
        return await pending(client, args.json)
    if args.command == "status":
        return await status(client, settings, args.id)
    if args.command == "artifacts":
        return await artifacts(client, args.id, args.json, args.run)
    if args.command == "cancel":
        return await cancel(client, args.id, args.reason, args.no_wait)
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
    assert registry is not None
    if args.command == "approve":
        return await approve(
            client, registry, args.id, args.reject, args.reason, changes, args.remember
        )
    if args.command == "steer":
        return await steer(client, registry, args.id, args.note, args.wait)
    if args.command == "resume":
        return await resume(client, settings, registry, args.id, args.no_wait, args.json)
    return await result(client, settings, registry, args.id, args.json)


def registry_of(args: argparse.Namespace) -> Registry:
    """The registered recipes, or a one-line reason; the modules named here are passed
    on (DURAFACT_RECIPES) to an embedded worker this command starts."""
    modules = recipe_modules(getattr(args, "recipes", []))
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
