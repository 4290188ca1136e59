"""Start durafact workflows and watch them, from the command line.

    python starter.py plan "Plan a weekend in Kraków" [--max-steps N]
    python starter.py reflect "Why durable workflows" [--accept-at X] [--max-rounds N]
    python starter.py answer questions.json [--max-repairs N] [--review off|optional|required]
                                            [--budget-tokens N]
    python starter.py route "Renovate the kitchen for 3000 EUR" [--approval-timeout DURATION]
                                                              [--on-timeout reject|escalate]
    python starter.py research "What does a city bike cost per day?" [--docs DIR] [--csv FILE]
                      [--csv-key COLUMN] [--url URL ...] [--search-endpoint URL] [--allow-private]
                      [--limit N] [--max-docs N]
        (each also takes [--id ID] [--no-wait] [--json])
    python starter.py pending [--json]          # every workflow waiting for a person
    python starter.py approve ID [--reject] [--reason TEXT] [--set FIELD=VALUE ...]
    python starter.py decide ID QUESTION_ID --approve|--reject [--reason TEXT]
    python starter.py status ID
    python starter.py result ID [--json]
    python starter.py up        # the embedded stack, in the background
    python starter.py down      # stop what `up` started

With TEMPORAL_ADDRESS unset and nothing answering on localhost:7233, the recipe
commands, `status` and `result` first start the embedded stack (`up`): the Temporal dev
server with its Web UI, the local model unless OPENAI_BASE_URL/OPENAI_API_KEY name
another one, and a worker. With TEMPORAL_ADDRESS set, no server is ever started.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import csv
import getpass
import json
import os
import re
import sys
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any, NoReturn, TextIO

from pydantic import BaseModel, ValidationError
from temporalio.client import WorkflowFailureError, WorkflowUpdateFailedError
from temporalio.common import (
    SearchAttributePair,
    TypedSearchAttributes,
    WorkflowIDConflictPolicy,
    WorkflowIDReusePolicy,
)
from temporalio.exceptions import ApplicationError, FailureError, WorkflowAlreadyStartedError
from temporalio.service import RPCError, RPCStatusCode

from activities.skills import SkillError, load_skills
from cli import embedded
from cli.connection import open_client
from cli.embedded import Embedded, EmbeddedError
from cli.settings import Settings, SettingsError
from durafact.answer_flow import AnswerBatchError
from durafact.approval import ApprovalAnswer, ApprovalOutcome, ApprovalQuestion
from durafact.sources import SourceFailure, SourceSpec
from workflows.answer_flow import AnswerFlowResult, AnswerFlowWorkflow, load_answer_batch
from workflows.plan_execute import Goal, PlanExecuteResult, PlanExecuteWorkflow
from workflows.recipe import AWAITING_APPROVAL, RECIPE_ATTRIBUTE, STATUS_ATTRIBUTE, Progress
from workflows.reflection import ReflectionInput, ReflectionResult, ReflectionWorkflow
from workflows.research import ResearchInput, ResearchResult, ResearchWorkflow
from workflows.supervisor import Facts, SupervisorRequest, SupervisorResult, SupervisorWorkflow

POLL_INTERVAL = 0.3
QUERY_TIMEOUT = timedelta(seconds=2)
RESULT_TYPES: dict[str, type[BaseModel]] = {
    "PlanExecuteWorkflow": PlanExecuteResult,
    "ReflectionWorkflow": ReflectionResult,
    "AnswerFlowWorkflow": AnswerFlowResult,
    "SupervisorWorkflow": SupervisorResult,
    "ResearchWorkflow": ResearchResult,
}
# The facts a rejection may correct (`approve --reject --set FIELD=VALUE`), per workflow type.
CORRECTABLE: dict[str, tuple[str, ...]] = {"SupervisorWorkflow": tuple(Facts.model_fields)}
ANSWER_HINT = "[--reject] [--reason TEXT] [--set FIELD=VALUE ...]"
REPO = Path(__file__).resolve().parent.parent
SKILLS = REPO / "skills"
# What `research` reads when no source is given: the shipped sample shop.
SAMPLE_DOCS = REPO / "examples" / "research" / "docs"
SAMPLE_CSV = REPO / "examples" / "research" / "prices.csv"


class Failed(Exception):
    """A one-line reason to stop, printed as `starter: <reason>`."""

    def __init__(self, message: str, code: int = 1) -> None:
        super().__init__(message)
        self.code = code


# --- command line ---------------------------------------------------------------------


class Parser(argparse.ArgumentParser):
    """argparse, but a usage mistake is one line instead of usage text and an error."""

    def error(self, message: str) -> NoReturn:
        if message.startswith("argument COMMAND: invalid choice:"):
            choice = message.split("invalid choice:", 1)[1].split("(")[0].strip()
            message = f"unknown command {choice} (commands: {', '.join(COMMANDS)})"
        else:
            message = f"{message} (see: python {self.prog} --help)"
        raise Failed(message, code=2)


COMMANDS = (
    "plan",
    "reflect",
    "answer",
    "route",
    "research",
    "pending",
    "approve",
    "decide",
    "status",
    "result",
    "up",
    "down",
)
RECIPE_COMMANDS = ("plan", "reflect", "answer", "route", "research")


def parser() -> Parser:
    top = Parser(prog="starter.py", description=__doc__.splitlines()[0])
    commands = top.add_subparsers(dest="command", required=True, metavar="COMMAND")
    # What every recipe command shares: which workflow, and how to wait for it.
    launch = Parser(add_help=False)
    launch.add_argument("--id", help="workflow id (default: a new one); reusing one attaches")
    launch.add_argument("--no-wait", action="store_true", help="print the id and return")
    launch.add_argument("--json", action="store_true", help="print one JSON object, no progress")

    plan = commands.add_parser(
        "plan", parents=[launch], help="start a PlanExecute workflow and wait for it"
    )
    plan.add_argument("goal", help="what the plan should achieve")
    plan.add_argument("--max-steps", type=int, default=3, help="upper bound on plan length")

    reflect = commands.add_parser(
        "reflect", parents=[launch], help="write, critique and rewrite a text on a topic"
    )
    reflect.add_argument("topic", help="what the text should be about")
    reflect.add_argument("--accept-at", type=float, default=0.8, help="score that accepts")
    reflect.add_argument("--max-rounds", type=int, default=2, help="rewrites at most")

    answer = commands.add_parser(
        "answer", parents=[launch], help="answer a batch of questions from their sources"
    )
    answer.add_argument("file", help="the batch: a JSON file (format in README)")
    answer.add_argument("--max-repairs", type=int, help="repair rounds (default: the file's, 1)")
    answer.add_argument(
        "--review",
        choices=("off", "optional", "required"),
        help="review policy (default: the file's)",
    )
    answer.add_argument("--budget-tokens", type=int, help="stop model calls past this many tokens")

    route = commands.add_parser(
        "route",
        parents=[launch],
        help="route a request to a specialist and ask a person to approve the report",
    )
    route.add_argument("request", help="what the person asks for")
    route.add_argument(
        "--approval-timeout",
        metavar="DURATION",
        help="how long the approval waits: 30s, 15m, 2h, 3d (default: as long as it takes)",
    )
    route.add_argument(
        "--on-timeout",
        choices=("reject", "escalate"),
        help="after the timeout: reject (default), or escalate once and then reject",
    )

    research = commands.add_parser(
        "research",
        parents=[launch],
        help="answer a question from documents, a CSV file and web pages, with provenance",
    )
    research.add_argument("question", help="what to find out")
    research.add_argument(
        "--docs", metavar="DIR", help="a directory of .md/.txt files (default: the sample shop's)"
    )
    research.add_argument(
        "--csv", metavar="FILE", help="a CSV file with a header row (default: the sample prices)"
    )
    research.add_argument(
        "--csv-key", metavar="COLUMN", help="the CSV column that names a row (default: the first)"
    )
    research.add_argument(
        "--url",
        action="append",
        default=[],
        metavar="URL",
        help="a web page to consider (repeatable); fetched only if the model chooses it",
    )
    research.add_argument("--search-endpoint", metavar="URL", help="a SearxNG JSON search API")
    research.add_argument(
        "--allow-private",
        action="store_true",
        help="let the web source fetch loopback and private addresses (a local wiki)",
    )
    research.add_argument("--limit", type=int, default=8, help="search results kept (default 8)")
    research.add_argument(
        "--max-docs", type=int, default=4, help="documents the model may read (default 4)"
    )

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
        help="with --reject: a corrected fact; the workflow rebuilds from it and asks again",
    )

    decide = commands.add_parser(
        "decide", help="answer a named question and print the outcome (the `decide` update)"
    )
    decide.add_argument("id", help="the workflow id")
    decide.add_argument("question_id", metavar="QUESTION_ID", help="e.g. approval:THREAD:1")
    verdict = decide.add_mutually_exclusive_group(required=True)
    verdict.add_argument("--approve", action="store_true", help="approve")
    verdict.add_argument("--reject", action="store_true", help="reject")
    decide.add_argument("--reason", default="", help="why: kept with the question")

    status = commands.add_parser("status", help="a workflow's Temporal and recipe status")
    status.add_argument("id")

    result = commands.add_parser("result", help="wait for a workflow's result and print it")
    result.add_argument("id")
    result.add_argument("--json", action="store_true", help="print one JSON object, no progress")

    commands.add_parser("up", help="start the embedded stack in the background")
    commands.add_parser("down", help="stop what `up` started")
    return top


@dataclass
class Launch:
    """A recipe command's workflow, checked and ready to start."""

    run: Callable[..., Any]
    arg: BaseModel
    recipe: str
    id_prefix: str
    summary: str
    details: str
    asks_approval: bool = False


def launch_of(args: argparse.Namespace) -> Launch:
    """The workflow a recipe command starts; bad input fails here, before any connection."""
    if args.command == "plan":
        goal = checked(Goal, {"text": args.goal, "max_steps": args.max_steps})
        return Launch(
            PlanExecuteWorkflow.run,
            goal,
            PlanExecuteWorkflow.recipe_name,
            "plan",
            f"plan: {summarize(goal.text)}",
            f"**Goal:** {goal.text}\n\n**Max steps:** {goal.max_steps}",
        )
    if args.command == "reflect":
        request = checked(
            ReflectionInput,
            {"topic": args.topic, "accept_at": args.accept_at, "max_rounds": args.max_rounds},
        )
        return Launch(
            ReflectionWorkflow.run,
            request,
            ReflectionWorkflow.recipe_name,
            "reflect",
            f"reflect: {summarize(request.topic)}",
            f"**Topic:** {request.topic}\n\n**Accept at:** {request.accept_at}, "
            f"**max rounds:** {request.max_rounds}",
        )
    if args.command == "route":
        if args.on_timeout is not None and args.approval_timeout is None:
            raise Failed("--on-timeout needs --approval-timeout", code=2)
        timeout = None
        if args.approval_timeout is not None:
            timeout = duration(args.approval_timeout, "--approval-timeout")
        request = checked(
            SupervisorRequest,
            {
                "request": args.request,
                "approval_timeout": timeout,
                "on_timeout": args.on_timeout or "reject",
            },
        )
        waits = (
            f"{args.approval_timeout}, then {request.on_timeout}"
            if timeout
            else "as long as it takes"
        )
        return Launch(
            SupervisorWorkflow.run,
            request,
            SupervisorWorkflow.recipe_name,
            "route",
            f"route: {summarize(request.request)}",
            f"**Request:** {request.request}\n\n**Routes:** {', '.join(request.routes)}, "
            f"**approval waits:** {waits}",
            asks_approval=True,
        )
    if args.command == "research":
        return research_launch(args)
    try:
        document = Path(args.file).read_bytes()
    except OSError as exc:
        raise Failed(f"cannot read {args.file}: {exc.strerror}", code=2) from None
    try:
        batch = load_answer_batch(
            document,
            max_repairs=args.max_repairs,
            review_policy=args.review,
            budget_tokens=args.budget_tokens,
        )
    except AnswerBatchError as exc:
        raise Failed(f"{args.file}: {exc}", code=2) from None
    return Launch(
        AnswerFlowWorkflow.run,
        batch,
        AnswerFlowWorkflow.recipe_name,
        "answer",
        f"answer: {len(batch.questions)} questions from {Path(args.file).name}",
        f"**Questions:** {len(batch.questions)}\n\n**Max repairs:** {batch.max_repairs}, "
        f"**review:** {batch.review_policy}, **budget:** {batch.budget_tokens or 'none'}",
    )


def research_launch(args: argparse.Namespace) -> Launch:
    """The research workflow: sources from the options (the sample shop without any),
    the shipped skills, all checked here."""
    sources = research_sources(args)
    try:
        skills = load_skills(SKILLS) if SKILLS.is_dir() else []
    except SkillError as exc:
        raise Failed(str(exc)) from None
    request = checked(
        ResearchInput,
        {
            "question": args.question,
            "sources": sources,
            "limit": args.limit,
            "max_docs": args.max_docs,
            "skills": skills,
        },
    )
    listed = ", ".join(f"{s.source_id} ({s.kind})" for s in request.sources)
    return Launch(
        ResearchWorkflow.run,
        request,
        ResearchWorkflow.recipe_name,
        "research",
        f"research: {summarize(request.question)}",
        f"**Question:** {request.question}\n\n**Sources:** {listed}, **limit:** "
        f"{request.limit}, **max docs:** {request.max_docs}",
    )


def research_sources(args: argparse.Namespace) -> list[SourceSpec]:
    """The `SourceSpec`s the options name, paths made absolute for the worker."""
    web = bool(args.url or args.search_endpoint)
    if args.allow_private and not web:
        raise Failed("--allow-private applies to --url and --search-endpoint", code=2)
    if args.csv_key and not args.csv:
        raise Failed("--csv-key needs --csv", code=2)
    if not (args.docs or args.csv or web):
        return [
            SourceSpec.files(str(SAMPLE_DOCS), source_id="docs"),
            SourceSpec.csv(str(SAMPLE_CSV), key="item", source_id="prices"),
        ]
    sources = []
    if args.docs:
        root = Path(args.docs).expanduser().resolve()
        if not root.is_dir():
            raise Failed(f"--docs: {args.docs} is not a directory", code=2)
        sources.append(SourceSpec.files(str(root), source_id="docs"))
    if args.csv:
        path = Path(args.csv).expanduser().resolve()
        try:
            with path.open(newline="", encoding="utf-8-sig") as handle:
                header = [name.strip() for name in next(csv.reader(handle), [])]
        except (OSError, UnicodeDecodeError, csv.Error) as exc:
            reason = exc.strerror if isinstance(exc, OSError) else exc
            raise Failed(f"--csv: cannot read {args.csv}: {reason}", code=2) from None
        if not header:
            raise Failed(f"--csv: {args.csv} has no header row", code=2)
        key = args.csv_key or header[0]
        if key not in header:
            raise Failed(
                f"--csv-key: {args.csv} has no column {key!r} ({', '.join(header)})", code=2
            )
        sources.append(SourceSpec.csv(str(path), key=key, source_id="prices"))
    if web:
        for url in [*args.url, *filter(None, [args.search_endpoint])]:
            if not url.startswith(("http://", "https://")):
                raise Failed(f"not an http(s) URL: {url}", code=2)
        sources.append(
            SourceSpec.web(
                search_endpoint=args.search_endpoint,
                urls=args.url or None,
                allow_private=args.allow_private or None,
            )
        )
    return sources


DURATION = re.compile(r"([1-9][0-9]*)([smhd])")
UNITS = {"s": "seconds", "m": "minutes", "h": "hours", "d": "days"}


def duration(text: str, option: str) -> timedelta:
    """`30s`, `15m`, `2h`, `3d`: a positive whole number and one unit, nothing else."""
    match = DURATION.fullmatch(text)
    if match is None:
        raise Failed(
            f"{option}: {text!r} is not a duration (a whole number above 0 and s, m, h or d: "
            "30s, 15m, 2h, 3d)",
            code=2,
        )
    return timedelta(**{UNITS[match[2]]: int(match[1])})


def corrections(pairs: list[str]) -> dict[str, str]:
    """`--set FIELD=VALUE` options as a dict; a malformed or repeated one is a one-line error."""
    changes: dict[str, str] = {}
    for pair in pairs:
        field, sep, value = pair.partition("=")
        field = field.strip()
        if not sep or not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", field):
            raise Failed(f"--set {pair!r}: expected FIELD=VALUE (e.g. budget=5000)", code=2)
        if not value.strip():
            raise Failed(f"--set {field}: the value is empty", code=2)
        if field in changes:
            raise Failed(f"--set {field}: given twice", code=2)
        changes[field] = value.strip()
    return changes


def checked(model: type[BaseModel], values: dict[str, Any]) -> Any:
    """`model` from command-line values, or a one-line reason naming the option."""
    try:
        return model.model_validate(values)
    except ValidationError as exc:
        error = exc.errors()[0]
        field = str(error["loc"][0]) if error["loc"] else ""
        reason = str(error.get("ctx", {}).get("error") or error["msg"])
        positional = next(iter(model.model_fields))
        if field and field != positional:
            reason = f"--{field.replace('_', '-')}: {reason}"
        raise Failed(reason, code=2) from None


async def main(argv: Sequence[str] | None = None) -> int:
    try:
        args = parser().parse_args(argv)
        if args.command == "up":
            return await up()
        if args.command == "down":
            embedded.down(Embedded.from_env(), say)
            return 0
        if args.command in RECIPE_COMMANDS:
            launch = launch_of(args)
            workflow_id = (
                args.id if args.id is not None else f"{launch.id_prefix}-{uuid.uuid4().hex[:8]}"
            )
            if not workflow_id.strip():
                raise Failed("the workflow id is empty", code=2)
            client, settings = await connect()
            return await start(client, settings, launch, workflow_id, args.no_wait, args.json)
        if args.command == "approve" and args.set and not args.reject:
            raise Failed("--set goes with --reject: corrected facts ask for a rebuild", code=2)
        changes = corrections(args.set) if args.command == "approve" else {}
        client, settings = await connect()
        if args.command == "pending":
            return await pending(client, args.json)
        if args.command == "approve":
            return await approve(client, args.id, args.reject, args.reason, changes)
        if args.command == "decide":
            return await decide(
                client, settings, args.id, args.question_id, args.approve, args.reason
            )
        if args.command == "status":
            return await status(client, settings, args.id)
        return await result(client, settings, args.id, args.json)
    except Failed as exc:
        fail(str(exc))
        return exc.code
    except EmbeddedError as exc:
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


def say(line: str, stream: TextIO | None = None) -> None:
    print(line, file=stream or sys.stdout, flush=True)


def note(line: str) -> None:
    say(line, sys.stderr)


def fail(message: str) -> None:
    say(f"starter: {one_line(message)}", sys.stderr)


def one_line(text: str) -> str:
    return " ".join(text.split())


# --- connecting, with the embedded default ---------------------------------------------


async def connect() -> tuple[Any, Settings]:
    """A client for the configured server, on a namespace ready for durafact workflows;
    the embedded stack starts first when no address is configured (cli/connection.py)."""
    try:
        return await open_client(note)
    except SettingsError as exc:
        raise Failed(str(exc)) from None


async def up() -> int:
    stack = Embedded.from_env()
    await embedded.up(stack, Settings.from_env(), say)
    return 0


# --- the commands ---------------------------------------------------------------------


async def start(
    client: Any, settings: Settings, launch: Launch, workflow_id: str, no_wait: bool, as_json: bool
) -> int:
    summary = launch.summary
    try:
        handle = await client.start_workflow(
            launch.run,
            launch.arg,
            id=workflow_id,
            task_queue=settings.task_queue,
            # The same --id while it runs attaches to that run; after it completed the
            # id is taken and its result is shown; after a failure, it runs again.
            id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING,
            id_reuse_policy=WorkflowIDReusePolicy.ALLOW_DUPLICATE_FAILED_ONLY,
            search_attributes=TypedSearchAttributes(
                [SearchAttributePair(RECIPE_ATTRIBUTE, launch.recipe)]
            ),
            static_summary=summary,
            static_details=f"{launch.details}\n\nStarted by `starter.py {launch.id_prefix}`.",
        )
        run_id = handle.result_run_id
        response = getattr(handle, "_start_workflow_response", None)
        started = bool(getattr(response, "started", True))
    except WorkflowAlreadyStartedError as exc:
        handle = client.get_workflow_handle(workflow_id, run_id=exc.run_id)
        run_id, started = exc.run_id, False
    except RPCError as exc:
        if "search attribute" in str(exc).lower():
            raise Failed(
                f"the server at {settings.temporal_address} lacks the search attributes: "
                + "; ".join(
                    f"temporal operator search-attribute create --name {a.name} --type Keyword"
                    for a in (RECIPE_ATTRIBUTE, STATUS_ATTRIBUTE)
                )
            ) from None
        raise

    description = await handle.describe()
    state = description.status.name if description.status else "UNKNOWN"
    url = settings.workflow_url(workflow_id, run_id)
    if not started:
        existing = await description.static_summary()
        if existing and existing != summary:
            note(f"starter: note: workflow {workflow_id} was started for {existing!r}; using it")
    if no_wait:
        if state == "RUNNING":
            await warn_if_no_worker(client, settings, description.task_queue)
        if as_json:
            emit_json(workflow_id, run_id, state, None, url)
        else:
            if started:
                say(f"started workflow {workflow_id} (run {run_id})")
            else:
                say(f"workflow {workflow_id} already exists ({state}, run {run_id})")
            say(f"Web UI: {url}")
            say(f"result: python starter.py result {workflow_id}")
            if launch.asks_approval:
                say(f"answer: python starter.py approve {workflow_id} {ANSWER_HINT}")
        return 0
    if not as_json:
        if started:
            say(f"started workflow {workflow_id} (run {run_id})")
        elif state == "RUNNING":
            say(f"attached to the running workflow {workflow_id} (run {run_id})")
        else:
            say(f"workflow {workflow_id} already finished ({state}, run {run_id}); its result:")
        say(f"Web UI: {url}")
    return await wait_and_print(client, settings, handle, description, run_id, url, as_json)


async def status(client: Any, settings: Settings, workflow_id: str) -> int:
    handle = client.get_workflow_handle(workflow_id)
    description = await describe(handle)
    state = description.status.name if description.status else "UNKNOWN"
    say(f"workflow {workflow_id}: {state} ({description.workflow_type}, run {description.run_id})")
    summary = await description.static_summary()
    if summary:
        say(f"summary: {summary}")
    try:
        recipe = await handle.query("status", result_type=str, rpc_timeout=QUERY_TIMEOUT)
        say(f"recipe status: {recipe}")
    except Exception:
        recipe = None
        attribute = description.typed_search_attributes.get(STATUS_ATTRIBUTE)
        say(f"recipe status: {attribute or 'unknown'} (no worker answered the status query)")
    if recipe == AWAITING_APPROVAL:
        with contextlib.suppress(Exception):
            for question in await pending_questions(handle):
                say(f"waiting for a person: {question.id} ({question.kind})")
        say(f"answer: python starter.py approve {workflow_id} {ANSWER_HINT}")
    say(f"Web UI: {settings.workflow_url(workflow_id, description.run_id)}")
    return 0


async def result(client: Any, settings: Settings, workflow_id: str, as_json: bool) -> int:
    handle = client.get_workflow_handle(workflow_id)
    description = await describe(handle)
    url = settings.workflow_url(workflow_id, description.run_id)
    return await wait_and_print(
        client, settings, handle, description, description.run_id, url, as_json
    )


# --- human approval ---------------------------------------------------------------------


async def pending_questions(handle: Any) -> list[ApprovalQuestion]:
    return await handle.query(
        "pending_questions", result_type=list[ApprovalQuestion], rpc_timeout=QUERY_TIMEOUT
    )


async def pending(client: Any, as_json: bool) -> int:
    """Every running workflow whose DurafactStatus is awaiting_approval (visibility, so it
    survives restarts), with its pending questions (the query)."""
    query = f'{STATUS_ATTRIBUTE.name}="{AWAITING_APPROVAL}" AND ExecutionStatus="Running"'
    executions = [execution async for execution in client.list_workflows(query)]

    async def questions_of(execution: Any) -> tuple[list[ApprovalQuestion], str | None]:
        handle = client.get_workflow_handle(execution.id, run_id=execution.run_id)
        try:
            return await pending_questions(handle), None
        except Exception:
            return [], "no worker answered the pending_questions query"

    answers = await asyncio.gather(*(questions_of(e) for e in executions))
    # Answered since the visibility store saw them: nothing waits any more.
    rows = [(e, qs, err) for e, (qs, err) in zip(executions, answers, strict=True) if qs or err]
    if as_json:
        document = {
            "workflows": [
                {
                    "workflow_id": e.id,
                    "run_id": e.run_id,
                    "workflow_type": e.workflow_type,
                    "questions": [q.model_dump(mode="json") for q in qs],
                    "error": err,
                }
                for e, qs, err in rows
            ]
        }
        say(json.dumps(document, ensure_ascii=False))
        return 0
    if not rows:
        say("nothing waits for a person")
        return 0
    count = 0
    for execution, questions, error in rows:
        if error:
            say(f"{execution.id} ({execution.workflow_type}): {error}")
        for question in questions:
            count += 1
            say(f"{execution.id}  {question.id}  {question.kind}")
            say(indent(question.text, "  "))
    say(
        f"{count} question(s) in {len(rows)} workflow(s) wait; answer one: "
        f"python starter.py approve ID {ANSWER_HINT}"
    )
    return 0


async def approve(
    client: Any, workflow_id: str, reject: bool, reason: str, changes: dict[str, str]
) -> int:
    """The `answer` signal for the workflow's oldest pending question, after checking that
    something waits, so a wrong id or a settled workflow is one clear line."""
    handle = client.get_workflow_handle(workflow_id)
    description = await running(handle)
    try:
        questions = await pending_questions(handle)
    except Exception:
        raise Failed(
            f"workflow {workflow_id}: no worker answered the pending_questions query "
            "(is a worker running? python starter.py up)"
        ) from None
    if not questions:
        raise Failed(f"workflow {workflow_id} has no pending question")
    fields = CORRECTABLE.get(description.workflow_type)
    unknown = sorted(set(changes) - set(fields)) if fields is not None else []
    if unknown:
        raise Failed(
            f"--set {unknown[0]}: not a fact of {description.workflow_type} "
            f"(facts: {', '.join(fields or ())})",
            code=2,
        )
    question = questions[0]
    await handle.signal(
        "answer",
        ApprovalAnswer(
            question_id=question.id,
            approved=not reject,
            reason=reason,
            changes=changes,
            by=person(),
        ),
    )
    verdict = "rejected" if reject else "approved"
    edits = f" with {assignments(changes)}" if changes else ""
    say(f"{verdict} {question.id} of workflow {workflow_id}{edits} (signal sent)")
    say(f"result: python starter.py result {workflow_id}")
    return 0


async def decide(
    client: Any,
    settings: Settings,
    workflow_id: str,
    question_id: str,
    approved: bool,
    reason: str,
) -> int:
    """The `decide` update: the outcome, or the validator's reason for refusing."""
    handle = client.get_workflow_handle(workflow_id)
    description = await running(handle)
    await warn_if_no_worker(client, settings, description.task_queue)
    answer = ApprovalAnswer(question_id=question_id, approved=approved, reason=reason, by=person())
    try:
        outcome = await handle.execute_update("decide", answer, result_type=ApprovalOutcome)
    except WorkflowUpdateFailedError as exc:
        raise Failed(f"decide refused: {failure_text(exc)}") from None
    verdict = "approved" if outcome.approved else "rejected"
    why = f": {outcome.reason}" if outcome.reason else ""
    say(f"{outcome.question_id} {verdict}{why}")
    say(f"result: python starter.py result {workflow_id}")
    return 0


async def running(handle: Any) -> Any:
    """The workflow's description; a one-line reason when it is not running."""
    description = await describe(handle)
    state = description.status.name if description.status else "UNKNOWN"
    if state != "RUNNING":
        raise Failed(f"workflow {handle.id} is {state}: nothing waits for an answer")
    return description


def assignments(changes: dict[str, str]) -> str:
    return ", ".join(f"{field}={value}" for field, value in changes.items())


def person() -> str:
    """Who answers, as recorded with the answer: the login name."""
    try:
        return getpass.getuser()
    except Exception:
        return ""


async def describe(handle: Any) -> Any:
    try:
        return await handle.describe()
    except RPCError as exc:
        if exc.status == RPCStatusCode.NOT_FOUND:
            raise Failed(f"no workflow with id {handle.id!r}") from None
        raise


# --- waiting, progress and printing ----------------------------------------------------


async def wait_and_print(
    client: Any,
    settings: Settings,
    handle: Any,
    description: Any,
    run_id: str,
    url: str,
    as_json: bool,
) -> int:
    running = description.status is not None and description.status.name == "RUNNING"
    if running:
        await warn_if_no_worker(client, settings, description.task_queue)
    handle = client.get_workflow_handle(
        handle.id, run_id=run_id, result_type=RESULT_TYPES.get(description.workflow_type)
    )
    outcome = asyncio.ensure_future(handle.result())
    feed = None if as_json or not running else ProgressFeed(handle)
    try:
        while not outcome.done():
            await asyncio.wait({outcome}, timeout=POLL_INTERVAL)
            if feed and not outcome.done():
                await feed.poll()
        if feed:
            await feed.poll()  # the announcements made since the last poll
        value = outcome.result()
    except WorkflowFailureError as exc:
        state = (await handle.describe()).status
        if as_json:
            emit_json(handle.id, run_id, state.name if state else "FAILED", None, url)
        raise Failed(f"workflow {handle.id} failed: {failure_text(exc)}") from None
    except asyncio.CancelledError:
        outcome.cancel()
        note(
            f"starter: stopped waiting; the workflow goes on: python starter.py result {handle.id}"
        )
        raise
    if as_json:
        emit_json(handle.id, run_id, "COMPLETED", value, url)
    else:
        print_result(value)
        say(f"Web UI: {url}")
    return 0


async def warn_if_no_worker(client: Any, settings: Settings, task_queue: str) -> None:
    """One line on stderr when nobody will run the workflow, so it never looks stuck."""
    worker = Embedded.from_env().piece("worker")
    recorded = worker.recorded()
    if (
        not settings.temporal_address_explicit
        and recorded
        and not embedded.is_our_process(*recorded)
    ):
        # The server still lists a worker that died in the last minute or so as a
        # poller; the embedded worker's pid file knows better.
        note(
            f"starter: warning: the embedded worker (pid {recorded[0]}) is not running "
            f"(see {worker.log_name}); unless another worker polls {task_queue!r}, nobody will "
            "run this workflow: run python starter.py up (or python worker.py)"
        )
        return
    try:
        polled = await embedded.has_live_poller(client, settings.temporal_namespace, task_queue)
    except Exception:
        return  # the check is a courtesy: never fail a run over it
    if not polled:
        note(
            f"starter: warning: no worker polls task queue {task_queue!r}, so nobody will run "
            "this workflow: run python worker.py (or python starter.py up)"
        )


class ProgressFeed:
    """Polls the `progress` query and prints each new announcement as one line,
    labelled with the recipe status it was made under."""

    def __init__(self, handle: Any) -> None:
        self.handle = handle
        self.offset = 0

    async def poll(self) -> None:
        try:
            page: Progress = await self.handle.query(
                "progress", self.offset, result_type=Progress, rpc_timeout=QUERY_TIMEOUT
            )
        except Exception:
            return  # not answerable yet (no workflow task done) or no worker: try again
        for event in page.events:
            say(indent(event.message, f"  [{event.status}] "))
            if event.kind == "question":
                # Once per question: a person must act before the workflow goes on.
                say(
                    f"  waiting for a person: python starter.py approve {self.handle.id} "
                    f"{ANSWER_HINT}"
                )
        self.offset = page.next_offset


def failure_text(exc: BaseException) -> str:
    """`Type: message` of what failed: the first ApplicationError under the wrappers
    (workflow, activity or child failure); its own causes are detail."""
    chain = []
    node: BaseException | None = exc
    while node is not None and len(chain) < 20:
        chain.append(node)
        node = node.__cause__
    app = next((e for e in chain if isinstance(e, ApplicationError)), None)
    if app is not None:
        return f"{app.type or 'ApplicationError'}: {one_line(app.message)}"
    root = chain[-1]
    message = root.message if isinstance(root, FailureError) else str(root)
    return f"{type(root).__name__}: {one_line(message)}"


def print_result(value: Any) -> None:
    if isinstance(value, PlanExecuteResult):
        texts = {r.index: r.text for r in value.results}
        say("steps:")
        for step in value.steps:
            say(indent(step.description, f"  {step.index + 1}. "))
            if step.index in texts:
                say(indent(texts[step.index], "     -> "))
        say("answer:")
        say(indent(value.answer.text, "  "))
    elif isinstance(value, ReflectionResult):
        scores = ", ".join(f"{score:.2f}" for score in value.scores)
        say(f"{value.ending} after {value.rounds} round(s); scores: {scores}")
        say("text:")
        say(indent(value.final.text, "  "))
    elif isinstance(value, AnswerFlowResult):
        answers = value.answers
        for item in value.results:
            say(f"{item.item_id}: {item.status} after {item.rounds} round(s)")
            if item.item_id in answers:
                say(indent(answers[item.item_id].answer, "  answer: "))
                say(indent(answers[item.item_id].quote, "  quote:  "))
            elif item.value is not None:
                say(indent(str(item.value), "  answer: "))
            for issue in item.issues:
                say(indent(issue.message, f"  {issue.code}: "))
        say(", ".join(f"{n} {status}" for status, n in value.counts.items()))
    elif isinstance(value, SupervisorResult):
        task = value.task
        how = f"fallback: {task.reason}" if task.source == "fallback" else "model"
        say(f"route: {value.route} ({how})")
        say(f"facts: {value.facts.line()}")
        say(f"report (attempt {value.report.attempt}):")
        say(indent(value.report.text, "  "))
        say("approvals:")
        for question in value.approvals:
            answer = question.answer
            by = f" by {answer.by}" if answer and answer.by else ""
            why = f": {answer.reason}" if answer and answer.reason else ""
            edits = assignments(answer.changes) if answer else ""
            changed = f" (changes: {edits})" if edits else ""
            say(f"  {question.id} ({question.kind}) {question.status}{by}{why}{changed}")
        say("reply:")
        say(indent(value.reply.text, "  "))
    elif isinstance(value, ResearchResult):
        if value.answer is not None:
            say("answer:")
            say(indent(value.answer, "  "))
            provenance = value.provenance()
            if provenance is not None:
                say("provenance:")
                say(indent(provenance.render(), "  "))
        else:
            say(f"insufficient: {value.reason}")
        for failure in value.ledger.find_all(SourceFailure):
            f = failure.data
            where = f.uid or f.source_id
            say(f"  {f.stage} failed: {where}: {f.error_type}: {one_line(f.message)}")
    elif isinstance(value, BaseModel):
        say(value.model_dump_json(indent=2))
    else:
        say(json.dumps(value, indent=2, default=str))
    if isinstance(
        value,
        PlanExecuteResult | ReflectionResult | AnswerFlowResult | SupervisorResult | ResearchResult,
    ):
        say(f"usage: {value.usage.total_tokens} tokens")


def indent(text: str, first: str) -> str:
    lines = text.strip().splitlines() or [""]
    rest = " " * len(first)
    return "\n".join([first + lines[0], *((rest + line).rstrip() for line in lines[1:])])


def emit_json(workflow_id: str, run_id: str, state: str, value: Any, url: str) -> None:
    data = value.model_dump(mode="json") if isinstance(value, BaseModel) else value
    document = {
        "workflow_id": workflow_id,
        "run_id": run_id,
        "status": state,
        "result": data,
        "ui_url": url,
    }
    say(json.dumps(document, ensure_ascii=False, default=str))


def summarize(text: str, limit: int = 100) -> str:
    line = one_line(text)
    return line if len(line) <= limit else line[: limit - 1] + "…"


def _exit(code: int) -> NoReturn:
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):
            stream.flush()
    # Skip interpreter finalization: in a short-lived client process, temporalio's
    # Rust threads can abort it ("PyGILState_Release", temporalio/sdk-python#300).
    os._exit(code)


def run() -> NoReturn:
    """The console script `durafact` and `python starter.py`."""
    try:
        _exit(asyncio.run(main()))
    except KeyboardInterrupt:
        _exit(130)


if __name__ == "__main__":
    run()
