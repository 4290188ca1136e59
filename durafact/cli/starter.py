"""Start durafact workflows and watch them, from the command line.

    durafact start TYPE --input JSON|@FILE     # any registered recipe
    durafact plan "Plan a weekend in Kraków" [--max-steps N]
    durafact reflect "Why durable workflows" [--accept-at X] [--max-rounds N]
    durafact answer questions.json [--max-repairs N] [--review off|optional|required]
    durafact route "Renovate the kitchen for 3000 EUR" [--approval-timeout DURATION]
                                                              [--on-timeout reject|escalate]
    durafact research "What does a city bike cost per day?" [--docs DIR] [--csv FILE]
                      [--csv-key COLUMN] [--url URL ...] [--search-endpoint URL] [--allow-private]
                      [--allow-network CIDR ...] [--limit N] [--max-docs N]
    durafact react "What is 17 * 23?" [--tools calculator,NAME ...] [--mcp NAME ...]
                      [--protocol text|native] [--max-turns N]
        (each also takes [--id ID] [--no-wait] [--json] [--model-deadline DURATION]
         [--budget-tokens N] [--budget-cost X] [--budget-ask [--budget-ask-timeout DURATION]]
         [--endpoint NAME ...] [--fallback-after DURATION] [--recipes MODULE[,MODULE...]])
    durafact chat [ID] [--memory digest|summaries|prune] [--tools NAME,...] [--no-stream]
                  [--budget-tokens N] [--budget-cost X] [--budget-ask] [--endpoint NAME ...]
    durafact chat ID --send TEXT [--json]   # one message, its reply
    durafact list [--recipe R] [--status S] [--over-cost X] [--limit N] [--json]
    durafact pending [--json]          # every workflow waiting for a person
    durafact approve ID [--reject] [--reason TEXT] [--set FIELD=VALUE ...]
                        [--remember call|tool|chat]
                                    # approving a budget question: --set tokens=N, cost=X
    durafact decide ID QUESTION_ID|N --approve|--reject [--reason TEXT]
                        [--remember call|tool|chat]
    durafact status ID
    durafact cancel ID [--reason TEXT] [--no-wait]
    durafact steer ID NOTE             # a person's note for a running agent or chat
    durafact result ID [--json] [--recipes MODULE[,MODULE...]]
    durafact resume ID [--no-wait] [--json]   # a failed run goes on where it stopped
    durafact artifacts ID [--json]     # every artifact of a run, texts included
    durafact serve [--host H] [--port P]   # the HTTP API and web console (127.0.0.1:8000)
    durafact up [--recipes MODULE[,MODULE...]]   # the embedded stack, in the background
    durafact down      # stop what `up` started

In a checkout, `python starter.py` is the same command line. `start` runs any registered workflow
type: the built-ins (PlanExecuteWorkflow, ...) and the recipes modules named by
`--recipes` (repeatable, or comma-separated), DURAFACT_RECIPES and the entry points
of the group `durafact.recipes` (durafact/runtime/registry.py); `--input` is validated against
the type of its `run` method's input before anything starts.

With no Temporal address configured and nothing answering on localhost:7233, the
recipe commands, `status` and `result` first start the embedded stack (`up`): the
Temporal dev server with its Web UI, the local model unless OPENAI_BASE_URL/
OPENAI_API_KEY name another one, and a worker (which runs the same recipes modules).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from collections.abc import Sequence
from typing import Any, NoReturn

from durafact.cli.artifacts import artifacts
from durafact.cli.budget_options import add_budget_options, budget_given, with_budget
from durafact.cli.chat import add_chat_command, chat, check_chat_args
from durafact.cli.commands import (
    approve,
    cancel,
    check_new_limits,
    corrections,
    decide,
    pending,
    result,
    status,
    steer,
)
from durafact.cli.endpoint_options import add_endpoint_options, endpoints_given, with_endpoints
from durafact.cli.launch import check_sendable, launch_of_type, start
from durafact.cli.listing import DEFAULT_LIMIT, MAX_LIMIT, amount, list_runs, name_filter
from durafact.cli.output import Failed, exit_now, fail, note, one_line, say
from durafact.cli.recipe_commands import RECIPE_COMMANDS, add_recipe_commands, duration, launch_of
from durafact.cli.registered import refuse_unknown_tools
from durafact.cli.resume import resume
from durafact.cli.serve import add_serve_command, check_serve_args, serve
from durafact.runtime import embedded
from durafact.runtime.embedded import Embedded, EmbeddedError, open_client
from durafact.runtime.registry import (
    ENV_VAR,
    RegistrationError,
    Registry,
    load_registry,
    recipe_modules,
)
from durafact.runtime.settings import Settings, SettingsError
from durafact.steer import note_problem
from durafact.tools import ToolListRequest


class Parser(argparse.ArgumentParser):
    """argparse, but a usage mistake is one line instead of usage text and an error."""

    def error(self, message: str) -> NoReturn:
        if message.startswith("argument COMMAND: invalid choice:"):
            choice = message.split("invalid choice:", 1)[1].split("(")[0].strip()
            message = f"unknown command {choice} (commands: {', '.join(COMMANDS)})"
        else:
            message = f"{message} (see: {self.prog} --help)"
        raise Failed(message, code=2)


COMMANDS = (
    "start",
    *RECIPE_COMMANDS,
    "chat",
    "list",
    "pending",
    "approve",
    "decide",
    "status",
    "result",
    "cancel",
    "steer",
    "resume",
    "artifacts",
    "serve",
    "up",
    "down",
)
# The commands that start a workflow.
LAUNCH_COMMANDS = ("start", *RECIPE_COMMANDS)


def parser() -> Parser:
    top = Parser(prog="durafact", description=__doc__.splitlines()[0])
    commands = top.add_subparsers(dest="command", required=True, metavar="COMMAND")
    # Which recipes modules to load besides the built-ins and the entry points.
    registration = Parser(add_help=False)
    registration.add_argument(
        "--recipes",
        action="append",
        default=[],
        metavar="MODULE[,MODULE...]",
        help="a recipes module to load (repeatable; also DURAFACT_RECIPES)",
    )
    # What every command that starts a workflow shares: which one, and how to wait.
    launch = Parser(add_help=False)
    launch.add_argument("--id", help="workflow id (default: a new one); reusing one attaches")
    launch.add_argument("--no-wait", action="store_true", help="print the id and return")
    launch.add_argument("--json", action="store_true", help="print one JSON object, no progress")
    launch.add_argument(
        "--model-deadline",
        type=lambda text: duration(text, "--model-deadline"),
        metavar="DURATION",
        help="how long a model or tool call keeps retrying before the run fails: 90s, 40m, "
        "2h, 1d (default: the recipe's; 24h for the built-ins)",
    )
    add_budget_options(launch)
    add_endpoint_options(launch)

    begin = commands.add_parser(
        "start",
        parents=[launch, registration],
        help="start any registered workflow type with a JSON input and wait for it",
    )
    begin.add_argument("type", metavar="TYPE", help="the workflow type, e.g. PlanExecuteWorkflow")
    begin.add_argument(
        "--input",
        metavar="JSON|@FILE",
        help="the input of its run method as JSON, or @FILE to read it (@- for stdin)",
    )
    add_recipe_commands(commands, [launch, registration])
    add_chat_command(commands)

    listing = commands.add_parser(
        "list", help="list runs with their status, tokens and cost, running ones first"
    )
    listing.add_argument("--recipe", help="only this recipe (plan_execute) or workflow type")
    listing.add_argument("--status", help="only runs in this phase (DurafactStatus): completed")
    listing.add_argument(
        "--over-cost", metavar="X", help="only runs whose cost is above X (DurafactCost)"
    )
    listing.add_argument(
        "--limit",
        type=int,
        default=DEFAULT_LIMIT,
        help=f"at most this many runs, 1-{MAX_LIMIT} (default %(default)s)",
    )
    listing.add_argument("--json", action="store_true", help="print one JSON object")

    pending = commands.add_parser("pending", help="list every workflow waiting for a person")
    pending.add_argument("--json", action="store_true", help="print one JSON object")

    approve = commands.add_parser(
        "approve", help="answer a workflow's pending question (the `answer` signal)"
    )
    approve.add_argument("id", help="the workflow id")
    approve.add_argument("--reject", action="store_true", help="reject instead of approving")
    approve.add_argument("--reason", default="", help="why: kept with the question")
    approve.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="FIELD=VALUE",
        help="with --reject: a corrected fact; the workflow rebuilds from it and asks again; "
        "approving a budget question: its new limit (tokens=80000, cost=5)",
    )
    add_remember_option(approve)

    decide = commands.add_parser(
        "decide", help="answer a named question and print the outcome (the `decide` update)"
    )
    decide.add_argument("id", help="the workflow id")
    decide.add_argument(
        "question_id",
        metavar="QUESTION_ID",
        help="e.g. approval:THREAD:1, or the question's number in its thread: 1",
    )
    verdict = decide.add_mutually_exclusive_group(required=True)
    verdict.add_argument("--approve", action="store_true", help="approve")
    verdict.add_argument("--reject", action="store_true", help="reject")
    decide.add_argument("--reason", default="", help="why: kept with the question")
    add_remember_option(decide)

    status = commands.add_parser("status", help="a workflow's Temporal and recipe status")
    status.add_argument("id")

    result = commands.add_parser(
        "result", parents=[registration], help="wait for a workflow's result and print it"
    )
    result.add_argument("id")
    result.add_argument("--json", action="store_true", help="print one JSON object, no progress")

    stop = commands.add_parser(
        "cancel", help="cancel a running workflow (Temporal's cancellation) and say how it ended"
    )
    stop.add_argument("id")
    stop.add_argument("--reason", default="", help="why: kept in the run's ledger")
    stop.add_argument("--no-wait", action="store_true", help="ask, and return at once")

    note = commands.add_parser(
        "steer",
        help="a person's note for a running ReAct run or chat, shown to the model before its "
        "next call",
    )
    note.add_argument("id")
    note.add_argument("note", metavar="NOTE")

    again = commands.add_parser(
        "resume",
        parents=[registration],
        help="continue a failed, timed-out or terminated run where it stopped (Temporal's reset)",
    )
    again.add_argument("id")
    again.add_argument("--no-wait", action="store_true", help="print the new run and return")
    again.add_argument("--json", action="store_true", help="print one JSON object, no progress")

    artifacts = commands.add_parser(
        "artifacts", help="every artifact of a run, running or closed, with its text and links"
    )
    artifacts.add_argument("id")
    artifacts.add_argument("--json", action="store_true", help="print one JSON object")
    artifacts.add_argument(
        "--run",
        metavar="RUN_ID",
        help="one run of the workflow (a tool loop that continued as new names its earlier "
        "runs as run:RUN_ID artifacts); default: the latest",
    )

    add_serve_command(commands, [registration])
    commands.add_parser(
        "up", parents=[registration], help="start the embedded stack in the background"
    )
    commands.add_parser("down", help="stop what `up` started")
    return top


def add_remember_option(command: argparse.ArgumentParser) -> None:
    command.add_argument(
        "--remember",
        choices=["call", "tool", "chat"],
        help="a tool question: let this answer decide later calls without asking: the same "
        "call (tool and arguments), the tool in this run, or the tool in this chat "
        "(sent by the `decide` update, so a refusal is shown)",
    )


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


def decoded(argv: Sequence[str]) -> list[str]:
    """The arguments, each valid UTF-8 text, or a one-line reason naming the first that
    is not (Python keeps undecodable bytes as surrogate escapes, which no workflow input,
    id or file name sent to the worker can hold)."""
    for number, argument in enumerate(argv, start=1):
        try:
            argument.encode("utf-8")
        except UnicodeEncodeError:
            shown = os.fsencode(argument).decode("utf-8", "backslashreplace")
            raise Failed(f"argument {number} is not valid UTF-8 text: {shown}", code=2) from None
    return list(argv)


async def main(argv: Sequence[str] | None = None) -> int:
    try:
        args = parser().parse_args(decoded(sys.argv[1:] if argv is None else argv))
        if args.command == "up":
            registry_of(args)
            return await up()
        if args.command == "down":
            embedded.down(Embedded.from_env(), say)
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
            token = check_serve_args(args.host, args.port)
            client, settings = await connect(console=False)  # this command is the console
            return await serve(client, settings, registry, args.host, args.port, token)
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
            return await steer(client, args.id, args.note)
        assert registry is not None
        if args.command == "resume":
            return await resume(client, settings, registry, args.id, args.no_wait, args.json)
        return await result(client, settings, registry, args.id, args.json)
    except Failed as exc:
        fail(str(exc))
        return exc.code
    except (EmbeddedError, SettingsError) as exc:
        fail(str(exc))
        return 1
    except BrokenPipeError:  # e.g. `| head`: the reader has gone, nothing to tell
        return 1
    except SystemExit as exc:  # --help
        return exc.code if isinstance(exc.code, int) else 0
    except Exception as exc:
        if os.environ.get("DURAFACT_DEBUG"):
            raise
        fail(f"{type(exc).__name__}: {one_line(str(exc))} (DURAFACT_DEBUG=1 shows the traceback)")
        return 1


# --- connecting, with the embedded default ---------------------------------------------


async def connect(console: bool = True) -> tuple[Any, Settings]:
    """A client for the configured server, on a namespace ready for durafact workflows;
    the embedded stack starts first when no address is configured
    (durafact/runtime/embedded.py), with its console unless `console` is False."""
    try:
        return await open_client(note, console=console)
    except SettingsError as exc:
        raise Failed(str(exc)) from None


async def up() -> int:
    stack = Embedded.from_env()
    await embedded.up(stack, Settings.from_env(), say)
    return 0


def run() -> NoReturn:
    """The console script `durafact` and `python starter.py`."""
    try:
        exit_now(None, asyncio.run(main()))
    except KeyboardInterrupt:
        exit_now(None, 130)


if __name__ == "__main__":
    run()
