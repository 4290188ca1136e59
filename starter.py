"""Start durafact workflows and watch them, from the command line.

    python starter.py plan "Plan a weekend in Kraków" [--max-steps N]
    python starter.py reflect "Why durable workflows" [--accept-at X] [--max-rounds N]
    python starter.py answer questions.json [--max-repairs N] [--review off|optional|required]
                                            [--budget-tokens N]
        (each also takes [--id ID] [--no-wait] [--json])
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
import json
import os
import sys
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any, NoReturn, TextIO

from pydantic import BaseModel, ValidationError
from temporalio.client import WorkflowFailureError
from temporalio.common import (
    SearchAttributePair,
    TypedSearchAttributes,
    WorkflowIDConflictPolicy,
    WorkflowIDReusePolicy,
)
from temporalio.exceptions import ApplicationError, FailureError, WorkflowAlreadyStartedError
from temporalio.service import RPCError, RPCStatusCode

from durafact import embedded
from durafact.answer_flow import AnswerBatchError
from durafact.embedded import Embedded, EmbeddedError
from durafact.settings import Settings
from workflows.answer_flow import AnswerFlowResult, AnswerFlowWorkflow, load_answer_batch
from workflows.plan_execute import Goal, PlanExecuteResult, PlanExecuteWorkflow
from workflows.recipe import RECIPE_ATTRIBUTE, STATUS_ATTRIBUTE, Progress
from workflows.reflection import ReflectionInput, ReflectionResult, ReflectionWorkflow

POLL_INTERVAL = 0.3
QUERY_TIMEOUT = timedelta(seconds=2)
RESULT_TYPES: dict[str, type[BaseModel]] = {
    "PlanExecuteWorkflow": PlanExecuteResult,
    "ReflectionWorkflow": ReflectionResult,
    "AnswerFlowWorkflow": AnswerFlowResult,
}


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


COMMANDS = ("plan", "reflect", "answer", "status", "result", "up", "down")


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
        if args.command in ("plan", "reflect", "answer"):
            launch = launch_of(args)
            workflow_id = (
                args.id if args.id is not None else f"{launch.id_prefix}-{uuid.uuid4().hex[:8]}"
            )
            if not workflow_id.strip():
                raise Failed("the workflow id is empty", code=2)
            client, settings = await connect()
            return await start(client, settings, launch, workflow_id, args.no_wait, args.json)
        client, settings = await connect()
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
    """A client for the configured server; the embedded stack is started when
    TEMPORAL_ADDRESS is unset and nothing answers on the embedded port."""
    stack = Embedded.from_env()
    settings = stack.settings(Settings.from_env())
    address = settings.temporal_address
    if settings.temporal_address_explicit:
        if not embedded.port_open(address, timeout=3):
            raise Failed(f"cannot reach Temporal at {address} (TEMPORAL_ADDRESS)")
    elif not embedded.port_open(address):
        note(
            f"nothing answers on {address}: starting the embedded stack (stop it: starter.py down)"
        )
        await embedded.up(stack, settings, note)
    try:
        client = await embedded.connect(settings)
    except (RuntimeError, TimeoutError) as exc:
        where = "TEMPORAL_ADDRESS" if settings.temporal_address_explicit else "embedded"
        raise Failed(
            f"cannot reach Temporal at {address} ({where}): {one_line(str(exc))}"
        ) from None
    return client, settings


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
        attribute = description.typed_search_attributes.get(STATUS_ATTRIBUTE)
        say(f"recipe status: {attribute or 'unknown'} (no worker answered the status query)")
    say(f"Web UI: {settings.workflow_url(workflow_id, description.run_id)}")
    return 0


async def result(client: Any, settings: Settings, workflow_id: str, as_json: bool) -> int:
    handle = client.get_workflow_handle(workflow_id)
    description = await describe(handle)
    url = settings.workflow_url(workflow_id, description.run_id)
    return await wait_and_print(
        client, settings, handle, description, description.run_id, url, as_json
    )


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
            say(f"  [{event.status}] {event.message}")
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
    elif isinstance(value, BaseModel):
        say(value.model_dump_json(indent=2))
    else:
        say(json.dumps(value, indent=2, default=str))
    if isinstance(value, PlanExecuteResult | ReflectionResult | AnswerFlowResult):
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


if __name__ == "__main__":
    try:
        _exit(asyncio.run(main()))
    except KeyboardInterrupt:
        _exit(130)
