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
    durafact COMMAND ARGUMENT [OPTIONS]   # a registered recipe's own (`Recipe.command`)
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
    durafact steer ID NOTE [--wait]    # a person's note for a running agent or chat
    durafact result ID [--json] [--recipes MODULE[,MODULE...]]
    durafact resume ID [--no-wait] [--json]   # a failed run goes on where it stopped
    durafact fork ID --set ARTIFACT=VALUE ... | --edit ARTIFACT | --drop ARTIFACT ...
                     [--id ID] [--no-wait] [--json]   # a what-if: reruns what depends on it
    durafact artifacts ID [--json]     # every artifact of a run, texts included
    durafact check [--recipe R] [--since DURATION|DATE] [--limit N] [--json]
                   [--history FILE ...] [--recipes MODULE[,MODULE...]]
                                       # before a deploy: replay runs against this code
    durafact eval ID ... | --recipe R [--since D] [--limit N]   # closed runs on the current code
                  [--offline] [--live-tools] [--score MODULE:FUNCTION] [--timeout DURATION]
                  [--json] [--recipes MODULE[,MODULE...]]
    durafact serve [--host H] [--port P] [--allow-host HOST ...]
                                       # the HTTP API and web console (127.0.0.1:8000)
    durafact up [--recipes MODULE[,MODULE...]]   # the embedded stack, in the background
    durafact down      # stop what `up` started
    durafact key ID    # a new payload encryption key line, ID=BASE64, for DURAFACT_KEYS

In a checkout, `python starter.py` is the same command line. `start` runs any registered workflow
type: the built-ins (PlanExecuteWorkflow, ...) and the recipes modules named by
`--recipes` (repeatable, or comma-separated), DURAFACT_RECIPES and the entry points
of the group `durafact.recipes` (durafact/_runtime/registry.py); `--input` is validated against
the type of its `run` method's input before anything starts.

This module is the grammar: every command and option, and the checks argparse runs on
their values. It imports nothing but the core, so `--help` and a usage mistake answer
at once; what a command does is imported once its arguments are read
(durafact/_cli/dispatch.py). The recipe commands are what recipes declare
(`Recipe.command`, durafact/_core/commands.py): the ready ones' from the core's table
(durafact/_core/ready_commands.py), a registered recipe's by loading the registry, which
imports Temporal and the recipes, so only for a word that is no built-in command, and
for `--help` while recipes modules are named (`--recipes`, DURAFACT_RECIPES).
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Any, NoReturn

from durafact._cli.output import Failed
from durafact._core.budget import parse_cost, parse_tokens
from durafact._core.commands import Command, Option
from durafact._core.commands import duration as parse_duration
from durafact._core.memory import RollingDigestSummarizer, WindowPruner, WindowSummarizer
from durafact._core.ready_commands import READY_COMMANDS

# durafact's own commands; between `start` and `chat` come the recipes' commands.
COMMANDS = (
    "start",
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
    "fork",
    "artifacts",
    "check",
    "eval",
    "serve",
    "up",
    "down",
    "key",
)
# The recipes modules named for the whole process (the registry's ENV_VAR, which is not
# imported to read it: tests/cli/test_imports.py checks that the two agree).
RECIPES_ENV = "DURAFACT_RECIPES"
# A new chat's memory, by the name `--memory` gives it.
MEMORY_POLICIES = {
    "digest": RollingDigestSummarizer,
    "summaries": WindowSummarizer,
    "prune": WindowPruner,
}
DEFAULT_LIMIT = 50  # `list`
CHECK_LIMIT = 100  # `check`
EVAL_LIMIT = 10  # `eval --recipe`
MAX_LIMIT = 1000
DEFAULT_HOST = "127.0.0.1"  # `serve`
DEFAULT_PORT = 8000


class UnknownCommand(Failed):
    """A command word that is none of the parser's commands."""


class Parser(argparse.ArgumentParser):
    """argparse, but a usage mistake is one line instead of usage text and an error."""

    known: tuple[str, ...] = COMMANDS

    def error(self, message: str) -> NoReturn:
        if message.startswith("argument COMMAND: invalid choice:"):
            choice = message.split("invalid choice:", 1)[1].split("(")[0].strip()
            message = f"unknown command {choice} (commands: {', '.join(self.known)})"
            raise UnknownCommand(message, code=2)
        raise Failed(f"{message} (see: {self.prog} --help)", code=2)


def read(argv: Sequence[str]) -> argparse.Namespace:
    """The arguments, with the commands of the registered recipes when a word is none of
    the built-in commands (or for `--help` while recipes modules are named)."""
    argv = decoded(argv)
    if argv[:1] in (["-h"], ["--help"]) and os.environ.get(RECIPES_ENV):
        return parser(registered_commands(argv)).parse_args(argv)
    try:
        return parser().parse_args(argv)
    except UnknownCommand:
        return parser(registered_commands(argv)).parse_args(argv)


def registered_commands(argv: Sequence[str]) -> list[Command]:
    """The commands the registered recipes declare besides the ready ones: the recipes
    modules of DURAFACT_RECIPES, the entry points and the `--recipes` in `argv`."""
    # Imported here: the registry imports Temporal and the recipes (see the docstring).
    from durafact._runtime.registry import RegistrationError, load_registry, recipe_modules

    named = [word.split("=", 1)[1] for word in argv if word.startswith("--recipes=")]
    named += [argv[i + 1] for i, word in enumerate(argv[:-1]) if word == "--recipes"]
    try:
        registry = load_registry(recipe_modules(named))
    except RegistrationError as exc:
        raise Failed(str(exc), code=2) from None
    ready = {command.name for command in READY_COMMANDS}
    declared = {name: r for name, r in registry.commands().items() if name not in ready}
    for name, recipe in declared.items():
        if name in COMMANDS:
            raise Failed(
                f"{recipe.name} declares the command {name!r}, which is one of durafact's own",
                code=2,
            )
    return [recipe.command for recipe in declared.values() if recipe.command is not None]


def parser(registered: Sequence[Command] = ()) -> Parser:
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
    recipe_commands = [*READY_COMMANDS, *registered]
    for command in recipe_commands:
        add_recipe_command(commands, command, [launch, registration])
    top.known = (
        "start",
        *(command.name for command in recipe_commands),
        *COMMANDS[1:],
    )
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
    note.add_argument(
        "--wait",
        action="store_true",
        help="wait until the note is in the conversation (by default: say it is queued, at once)",
    )

    again = commands.add_parser(
        "resume",
        parents=[registration],
        help="continue a failed, timed-out or terminated run where it stopped (Temporal's reset)",
    )
    again.add_argument("id")
    again.add_argument("--no-wait", action="store_true", help="print the new run and return")
    again.add_argument("--json", action="store_true", help="print one JSON object, no progress")

    add_fork_command(commands, [registration])

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

    add_check_command(commands, [registration])
    add_eval_command(commands, [registration])
    add_serve_command(commands, [registration])
    commands.add_parser(
        "up", parents=[registration], help="start the embedded stack in the background"
    )
    commands.add_parser("down", help="stop what `up` started")
    key = commands.add_parser(
        "key", help="print a new payload encryption key line, ID=BASE64, for DURAFACT_KEYS"
    )
    key.add_argument("id", nargs="?", default="k1", help="the key's id (default: k1)")
    return top


def add_remember_option(command: argparse.ArgumentParser) -> None:
    command.add_argument(
        "--remember",
        choices=["call", "tool", "chat"],
        help="a tool question: let this answer decide later calls without asking: the same "
        "call (tool and arguments), the tool in this run, or the tool in this chat "
        "(sent by the `decide` update, so a refusal is shown)",
    )


def add_recipe_command(
    commands: Any, command: Command, parents: list[argparse.ArgumentParser]
) -> None:
    """A recipe's own command (`Recipe.command`), with the options every launch shares
    (`parents`). Its values go under their own names (`values_of`), apart from those."""
    recipe = commands.add_parser(command.name, parents=parents, help=command.help)
    recipe.set_defaults(declared=command)
    recipe.add_argument(
        VALUE + command.argument,
        metavar=command.metavar or command.argument,
        help=command.argument_help,
    )
    for option in command.options:
        try:
            recipe.add_argument(option.flag, **option_settings(option))
        except argparse.ArgumentError as exc:  # e.g. a recipe's own `--id`
            raise Failed(f"command {command.name}: {exc}", code=2) from None


VALUE = "value:"  # where a recipe command's values are, apart from durafact's own options


def option_settings(option: Option) -> dict[str, Any]:
    if option.switch:
        return {"dest": VALUE + option.name, "action": "store_true", "help": option.help}
    return {
        "dest": VALUE + option.name,
        "action": "append" if option.many else "store",
        "type": converter(option),
        "default": option.default,
        "choices": option.choices,
        # argparse names a value by its dest, or lists the choices.
        "metavar": option.metavar or (None if option.choices else option.name.upper()),
        "help": option.help,
    }


def converter(option: Option) -> Any:
    """How argparse reads the option's value: a type as argparse does (`invalid int
    value`); a function's ValueError as one line naming the option (exit code 2)."""
    if isinstance(option.type, type):
        return option.type

    def convert(text: str) -> Any:
        try:
            return option.type(text)
        except ValueError as exc:
            raise Failed(f"{option.flag}: {exc}", code=2) from None

    return convert


def values_of(args: argparse.Namespace, command: Command) -> dict[str, Any]:
    """A recipe command's values, by the field each fills."""
    names = [command.argument, *(option.name for option in command.options)]
    return {name: getattr(args, VALUE + name) for name in names}


def add_chat_command(commands: Any) -> None:
    chat = commands.add_parser(
        "chat", help="talk to a durable chat: each line is sent, the reply streams"
    )
    chat.add_argument("id", nargs="?", help="the chat's workflow id (default: a new chat)")
    chat.add_argument("--send", metavar="TEXT", help="send one message, print the reply, exit")
    chat.add_argument("--json", action="store_true", help="with --send: print one JSON object")
    chat.add_argument(
        "--memory",
        choices=tuple(MEMORY_POLICIES),
        default="digest",
        help="a new chat's memory: one rolling digest (default), numbered summaries, or "
        "the last messages only",
    )
    chat.add_argument(
        "--tools", default="", metavar="NAME,...", help="worker tools a new chat may use"
    )
    chat.add_argument("--no-stream", action="store_true", help="a new chat's replies arrive whole")
    add_budget_options(chat)  # a new chat's
    add_endpoint_options(chat)


def add_budget_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--budget-tokens",
        type=lambda text: parsed(parse_tokens, text, "--budget-tokens"),
        metavar="N",
        help="tokens the run's model calls may use, its children's included",
    )
    parser.add_argument(
        "--budget-cost",
        type=lambda text: parsed(parse_cost, text, "--budget-cost"),
        metavar="X",
        help="what the run may cost, in the worker's currency (its models need DURAFACT_PRICES)",
    )
    parser.add_argument(
        "--budget-ask",
        action="store_true",
        help="when the budget is spent, ask a person (durafact approve ID [--set tokens=N]) "
        "instead of ending the run over_budget",
    )
    parser.add_argument(
        "--budget-ask-timeout",
        type=lambda text: duration(text, "--budget-ask-timeout"),
        metavar="DURATION",
        help="with --budget-ask: how long the question waits, then the run ends over_budget "
        "(default: as long as it takes)",
    )


def parsed(parse: Any, text: str, option: str) -> Any:
    """`parse(text, option)`, its ValueError one line (exit code 2)."""
    try:
        return parse(text, option)
    except ValueError as exc:
        raise Failed(str(exc), code=2) from None


def add_endpoint_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--endpoint",
        action="append",
        default=[],
        metavar="NAME",
        help="a model endpoint configured on the worker (repeatable, in order: a call that "
        "keeps failing on one moves to the next; default: the worker's `default`)",
    )
    parser.add_argument(
        "--fallback-after",
        type=lambda text: duration(text, "--fallback-after"),
        metavar="DURATION",
        help="how long a call fails on one endpoint before it moves to the next (default 2m)",
    )


def add_check_command(commands: Any, parents: list[Any]) -> None:
    check = commands.add_parser(
        "check",
        parents=parents,
        help="before a deploy: replay the runs of the namespace against the recipes registered "
        "here and name each one this code would break",
    )
    check.add_argument("--recipe", help="only this recipe's runs (plan_execute) or workflow type")
    check.add_argument(
        "--since",
        type=lambda text: since(text, "--since"),
        metavar="DURATION|DATE",
        help="closed runs only when they closed since then: 12h, 7d, 2026-01-31 (running "
        "runs are always checked)",
    )
    check.add_argument(
        "--limit",
        type=int,
        help=f"at most this many runs, running ones first, 1-{MAX_LIMIT} (default {CHECK_LIMIT})",
    )
    check.add_argument(
        "--history",
        action="extend",
        nargs="+",
        default=[],
        metavar="FILE",
        help="replay these exported histories instead (`temporal workflow show --output "
        "json`): no server needed",
    )
    check.add_argument("--json", action="store_true", help="print one JSON object")


def add_eval_command(commands: Any, parents: list[Any]) -> None:
    evaluation = commands.add_parser(
        "eval",
        parents=parents,
        help="re-run closed runs on the current code: what a change does to them",
    )
    evaluation.add_argument("ids", nargs="*", metavar="ID", help="closed runs to re-run")
    evaluation.add_argument(
        "--recipe", metavar="R", help="instead of ids: the last closed runs of this recipe"
    )
    evaluation.add_argument(
        "--since",
        type=lambda text: since(text, "--since"),
        metavar="D",
        help="with --recipe: closed since a time ago (2d, 12h) or a date (2026-01-31)",
    )
    evaluation.add_argument(
        "--limit",
        type=int,
        default=EVAL_LIMIT,
        metavar="N",
        help=f"with --recipe: at most this many runs, 1-{MAX_LIMIT} (default %(default)s)",
    )
    evaluation.add_argument(
        "--offline",
        action="store_true",
        help="send no request to a model: a changed one is reported, and answered with the "
        "recorded answer of the same call",
    )
    evaluation.add_argument(
        "--live-tools",
        action="store_true",
        help="run tool calls and source reads for real (default: their recorded answers)",
    )
    evaluation.add_argument(
        "--score",
        metavar="MODULE:FUNCTION",
        help="rate each new output against the old: FUNCTION(old, new) returns a number",
    )
    evaluation.add_argument(
        "--timeout",
        type=lambda text: duration(text, "--timeout"),
        metavar="DURATION",
        help="how long one re-run may take (default 10m)",
    )
    evaluation.add_argument("--json", action="store_true", help="print one JSON object")


def since(text: str, option: str) -> datetime:
    """A moment given as how long ago (`12h`, `7d`) or as a date or time (`2026-01-31`,
    `2026-01-31T08:00`, UTC unless it says otherwise)."""
    try:
        return datetime.now(UTC) - parse_duration(text)
    except ValueError:
        pass
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        raise Failed(
            f"{option} {text!r}: a duration (30m, 12h, 7d) or a date (2026-01-31)", code=2
        ) from None
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)


def add_fork_command(commands: Any, parents: list[Any]) -> None:
    fork = commands.add_parser(
        "fork",
        parents=parents,
        help="a what-if: a finished run again with an artifact edited, rerunning only what "
        "depends on it",
    )
    fork.add_argument("id", help="the finished run")
    fork.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="ARTIFACT=VALUE",
        help="an artifact's new value: its text (a step, a result, a quote, a claim), or a "
        "JSON object of the fields to change (repeatable)",
    )
    fork.add_argument(
        "--edit", metavar="ARTIFACT", help="edit the artifact's JSON in $EDITOR (or $VISUAL)"
    )
    fork.add_argument(
        "--drop",
        action="append",
        default=[],
        metavar="ARTIFACT",
        help="leave the artifact out (a quote, a claim; repeatable)",
    )
    fork.add_argument(
        "--id", dest="new_id", help="the new run's workflow id (default: ID-fork-XXXXXXXX)"
    )
    fork.add_argument("--no-wait", action="store_true", help="print the new run and return")
    fork.add_argument("--json", action="store_true", help="print one JSON object, no progress")


def add_serve_command(commands: Any, parents: list[Any]) -> None:
    serve = commands.add_parser(
        "serve", parents=parents, help="the HTTP API and the web console (DURAFACT_API_TOKEN)"
    )
    serve.add_argument("--host", default=DEFAULT_HOST, help="address to listen on (%(default)s)")
    serve.add_argument("--port", type=int, default=DEFAULT_PORT, help="port (%(default)s)")
    serve.add_argument(
        "--allow-host",
        action="append",
        default=[],
        metavar="HOST",
        help="a name the server is reached by besides loopback and its address, as the Host "
        "header writes it: NAME or NAME:PORT (repeatable; also DURAFACT_API_ALLOW_HOSTS)",
    )


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


def duration(text: str, option: str) -> timedelta:
    """`30s`, `15m`, `2h`, `3d`: a positive whole number and one unit, nothing else."""
    try:
        return parse_duration(text)
    except ValueError as exc:
        raise Failed(f"{option}: {exc}", code=2) from None
