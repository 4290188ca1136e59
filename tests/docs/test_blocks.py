"""Every code block of the documentation that shows a program or a command is run, and
what a block shows as output is what the command prints (tests/docs/blocks.py says how
a block is marked).

Each page is one test, its blocks run in order in a project directory of its own (so a
block can run the module an earlier block wrote), against the session's dev server and
scripted model (tests/conftest.py), on a task queue of the page's own:

- `python`: written to the project (`file: PATH`, else `example_LINE.py`) and run as a
  module, `python -m NAME`; it must exit 0.
- `sh`, `bash`: run by `bash -eo pipefail` in the project; it must exit 0. A command
  ending in `&` runs in the background until the block ends.
- `console`: each `$ COMMAND` is run by bash (output and errors together, as a terminal
  shows them) and its output compared with the lines under it. `...` alone on a line
  stands for any lines. A run moves on by itself between two commands, so a command
  whose output does not match yet is run again, for up to RETRY_FOR seconds, as a
  person looks again. A command ending in `&` runs in the background and shows
  nothing; a worker (`durafact-worker`) is waited for until it polls, a server
  (`durafact serve`) until it answers, as a person waits for either to start.

The project starts with a copy of the checkout's `examples/` (a page runs
`python examples/notes_mcp.py` as a clone would).

Each block gets a task queue of its own. Unless it starts a worker of its own
(`durafact-worker`, `durafact up`), an in-process worker serves that queue on the
scripted model while the block runs. The
commands get TEMPORAL_ADDRESS, DURAFACT_TASK_QUEUE and OPENAI_BASE_URL (the scripted
model, which answers as whatever model it is asked for: `gpt-4o-mini` by default); the
project directory is on PYTHONPATH. NORMALISE lists what may differ from run to run.

DURAFACT_DOCS_UPDATE=1 writes what a console block's commands printed into the page
in place of what it showed, where the two differ: for writing a new example, never for
a test run (read the diff).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import shutil
import signal
import socket
import sys
import time
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from temporalio.client import Client
from temporalio.service import RPCError

from durafact._runtime.connection import has_live_poller
from durafact._runtime.settings import Settings
from durafact._runtime.worker import build_worker
from durafact.testing import ScriptedModel, start_dev_server
from tests.docs import models
from tests.docs.blocks import Block, all_blocks, blocks_of, pages
from tests.helpers import ROOT, clean_env, free_port

RETRY_FOR = 30.0
UPDATE = os.environ.get("DURAFACT_DOCS_UPDATE") == "1"
# Ids and times that differ on every run, each replaced by a name on both sides.
NORMALISE = [
    (re.compile(r"\b[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\b"), "<uuid>"),
    (re.compile(r"\b\d{4}-\d\d-\d\d \d\d:\d\d\b"), "<time>"),
]
# The console's documented port, moved to a free one (8000 may be taken here).
CONSOLE_PORT = "8000"
OWN_WORKER = re.compile(r"\bdurafact-worker\b|\bdurafact up\b|\bworker\.py\b")


def normalise(text: str) -> list[str]:
    for pattern, name in NORMALISE:
        text = pattern.sub(name, text)
    lines = [line.rstrip() for line in text.strip("\n").splitlines()]
    return lines


def matches(expected: list[str], actual: list[str]) -> bool:
    """Whether `actual` is `expected`, where a line `...` stands for any lines."""
    if not expected:
        return not actual
    if expected[0] == "...":
        return any(matches(expected[1:], actual[k:]) for k in range(len(actual) + 1))
    return bool(actual) and actual[0] == expected[0] and matches(expected[1:], actual[1:])


def commands(block: Block) -> list[tuple[str, list[str]]]:
    """A console block's `$ COMMAND` lines (joined where a line ends in `\\`), each
    with the lines it printed."""
    found: list[tuple[str, list[str]]] = []
    lines = block.text.rstrip("\n").splitlines()
    assert lines and lines[0].startswith("$ "), f"{block.where}: a session starts with `$ `"
    k = 0
    while k < len(lines):
        command = lines[k][2:]
        while command.endswith("\\"):
            k += 1
            command = command[:-1] + "\n" + lines[k]
        k += 1
        output = []
        while k < len(lines) and not lines[k].startswith("$ "):
            output.append(lines[k])
            k += 1
        found.append((command, output))
    return found


async def stop_group(process: asyncio.subprocess.Process) -> None:
    """Stop a process and everything it started (its session's group): SIGTERM, as a
    person's Ctrl-C would, then SIGKILL after 30 s."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGTERM)
    try:
        await asyncio.wait_for(process.wait(), 30)
    except TimeoutError:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        await process.wait()


class Project:
    """A page's project directory, its environment, and the processes its blocks left
    running in the background."""

    def __init__(self, root: Path, client: Client, model: ScriptedModel) -> None:
        self.root = root
        self.client = client
        self.model = model
        self.queue = f"docs-{uuid.uuid4().hex[:8]}"
        self.port = str(free_port())
        bin_dir = str(Path(sys.executable).parent)
        # The checkout's own `durafact` package (a worktree's too, not only the installed
        # one), and nothing else of the checkout, after the project.
        checkout = root.parent / "checkout"
        checkout.mkdir(exist_ok=True)
        (checkout / "durafact").symlink_to(ROOT / "durafact")
        self.env = clean_env(
            TEMPORAL_ADDRESS=client.service_client.config.target_host,
            DURAFACT_TASK_QUEUE=self.queue,
            OPENAI_BASE_URL=model.url,
            OPENAI_API_KEY="docs",
            PYTHONPATH=os.pathsep.join((str(root), str(checkout))),
            PATH=f"{bin_dir}{os.pathsep}{os.environ['PATH']}",
            COLUMNS="80",
        )
        self.background: list[asyncio.subprocess.Process] = []
        self.queues = [self.queue]

    async def end_runs(self) -> None:
        """Terminate what the page left waiting (a question nobody answers, a held run):
        the pages share a server, and another page's `pending` or `list` must not see
        it once its worker is gone."""
        for queue in self.queues:
            query = f'TaskQueue="{queue}" AND ExecutionStatus="Running"'
            async for run in self.client.list_workflows(query):
                with contextlib.suppress(RPCError):
                    await self.client.get_workflow_handle(run.id, run_id=run.run_id).terminate(
                        "the docs page ended"
                    )

    def local(self, command: str) -> str:
        return command.replace(f":{CONSOLE_PORT}", f":{self.port}").replace(
            f"--port {CONSOLE_PORT}", f"--port {self.port}"
        )

    async def shell(self, script: str, timeout: float) -> tuple[int, str]:
        """Run `script` by bash; what it printed, output and errors together. Its output
        goes to a file, not a pipe: what it left in the background would hold a pipe
        open after it ended. Then what it left is stopped."""
        log = self.root.parent / "shell.log"
        with log.open("wb") as out:
            process = await asyncio.create_subprocess_exec(
                "bash", "-eo", "pipefail", "-c", script, cwd=self.root, env=self.env,
                stdout=out, stderr=asyncio.subprocess.STDOUT, start_new_session=True,
            )  # fmt: skip
            try:
                await asyncio.wait_for(process.wait(), timeout)
            finally:
                await stop_group(process)
        assert process.returncode is not None
        return process.returncode, log.read_text().replace(self.port, CONSOLE_PORT)

    async def start_background(self, command: str) -> None:
        process = await asyncio.create_subprocess_exec(
            "bash", "-c", command, cwd=self.root, env=self.env,
            stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.DEVNULL,
            start_new_session=True,
        )  # fmt: skip
        self.background.append(process)
        deadline = time.monotonic() + 30
        while not await self.serving(command):
            assert process.returncode is None, f"`{command}` exited {process.returncode}"
            assert time.monotonic() < deadline, f"`{command}` did not start in 30 s"
            await asyncio.sleep(0.2)

    async def serving(self, command: str) -> bool:
        """Whether what `command` started in the background is ready: a worker polls
        the block's queue, a server answers on its port."""
        if "durafact-worker" in command:
            return await has_live_poller(self.client, self.client.namespace, self.queue)
        if "durafact serve" in command:
            with contextlib.suppress(OSError):
                socket.create_connection(("127.0.0.1", int(self.port)), timeout=1).close()
                return True
            return False
        return True

    async def stop_background(self) -> None:
        for process in self.background:
            await stop_group(process)
        self.background.clear()

    @contextlib.asynccontextmanager
    async def worker(self, block: Block) -> AsyncIterator[None]:
        if OWN_WORKER.search(block.text):
            yield
            return
        settings = Settings(
            openai_base_url=self.model.url, openai_api_key="docs", task_queue=self.queue
        )
        async with build_worker(self.client, settings):
            yield


async def run_python(project: Project, block: Block) -> None:
    path = Path(block.marks.get("file") or f"example_{block.line}.py")
    (project.root / path).parent.mkdir(parents=True, exist_ok=True)
    (project.root / path).write_text(block.text)
    module = ".".join(path.with_suffix("").parts)
    code, out = await project.shell(f"python -m {module}", timeout=120)
    assert code == 0 or sdk_exit_abort(code, out), f"{block.where}: python -m {module}: {out}"


async def run_shell(project: Project, block: Block) -> None:
    code, out = await project.shell(project.local(block.text), timeout=120)
    assert code == 0, f"{block.where}: exited {code}:\n{out}"


async def run_console(project: Project, block: Block) -> None:
    printed: list[tuple[str, str]] = []
    for command, shown in commands(block):
        if command.rstrip().endswith("&"):
            assert not shown, f"{block.where}: `{command}` runs in the background: no output"
            await project.start_background(project.local(command.rstrip()[:-1]))
            printed.append((command, ""))
            continue
        expected = normalise("\n".join(shown))
        deadline = time.monotonic() + RETRY_FOR
        first = None
        while True:
            _, out = await project.shell(project.local(command), timeout=120)
            first = out if first is None else first
            actual = normalise(out)
            if matches(expected, actual) or time.monotonic() > deadline or UPDATE:
                break
            await asyncio.sleep(0.3)
        # What the page keeps: its own lines where they match (its `...` too), else the
        # first output (DURAFACT_DOCS_UPDATE).
        printed.append((command, "\n".join(shown) if matches(expected, actual) else first))
        if UPDATE:
            continue
        assert matches(expected, actual), (
            f"{block.where}: `$ {command}` printed\n" + "\n".join(normalise(first))
            + "\n--- the page shows\n" + "\n".join(expected)
        )  # fmt: skip
    if UPDATE and [shown for _, shown in commands(block)] != [
        out.rstrip("\n").splitlines() for _, out in printed
    ]:  # fmt: skip
        rewrite(block, printed)


def rewrite(block: Block, printed: list[tuple[str, str]]) -> None:
    """Put what the commands printed into the page in place of the block's text."""
    page = ROOT / block.page
    now = next(b for b in blocks_of(block.page) if (b.lang, b.text) == (block.lang, block.text))
    lines = page.read_text().splitlines()
    end = next(j for j in range(now.line, len(lines)) if lines[j].strip() == "```")
    indent = " " * (len(lines[now.line - 1]) - len(lines[now.line - 1].lstrip()))
    session = []
    for command, out in printed:
        session.append(indent + "$ " + command.replace("\n", "\\\n"))
        session.extend((indent + line).rstrip() for line in out.rstrip("\n").splitlines())
    lines[now.line : end] = session
    page.write_text("\n".join(lines) + "\n")


def sdk_exit_abort(code: int, out: str) -> bool:
    """A program that aborted after its work was done, while the interpreter shut down:
    temporalio's Rust threads call into Python during finalization
    (temporalio/sdk-python#300; tests/test_user_project.py meets it too). bash reports
    the SIGABRT as 134."""
    return code in (-6, 134) and "PyGILState_Release" in out and "finalizing" in out


RUNNERS = {"python": run_python, "sh": run_shell, "bash": run_shell, "console": run_console}


async def run_block(project: Project, block: Block) -> None:
    project.model.reset()
    project.queue = f"docs-{uuid.uuid4().hex[:8]}"
    project.queues.append(project.queue)
    project.env["DURAFACT_TASK_QUEUE"] = project.queue
    setup = block.marks.get("model")
    if setup:
        getattr(models, setup.replace("-", "_"))(project.model)
    try:
        async with project.worker(block):
            await RUNNERS[block.lang](project, block)
    finally:
        project.model.release_all()
        await project.stop_background()


@pytest.fixture(scope="module")
async def client() -> AsyncIterator[Client]:
    """A dev server of the pages' own, in place of the session's: a page's `pending` and
    `list` show what its blocks started, never a run another test left waiting."""
    environment = await start_dev_server()
    try:
        yield environment.client
    finally:
        await environment.shutdown()


# A page of a minute or more, started first (tests/conftest.py) rather than left to the end.
LONG_PAGES = {Path("docs/operations/deploy.md")}


def runnable_pages() -> list[Any]:
    return [
        pytest.param(page, id=str(page), marks=[pytest.mark.long_running] * (page in LONG_PAGES))
        for page in pages()
        if any(block.runs for block in blocks_of(page))
    ]


@pytest.mark.parametrize("page", runnable_pages())
async def test_every_block_of_the_page_runs_as_shown(
    page: Path, client: Client, model: ScriptedModel, tmp_path: Path
) -> None:
    project = Project(tmp_path / "project", client, model)
    shutil.copytree(ROOT / "examples", project.root / "examples")
    try:
        for block in blocks_of(page):
            if "file" in block.marks and not block.runs:
                (project.root / block.marks["file"]).write_text(block.text)
            elif block.runs:
                await run_block(project, block)
    finally:
        await project.end_runs()


def test_every_block_says_how_it_is_checked() -> None:
    from tests.docs.blocks import KEYS, RUN, SHOWN

    for block in all_blocks():
        assert block.lang in RUN | SHOWN, (
            f"{block.where}: a block says its language ({block.lang!r})"
        )
        assert set(block.marks) <= KEYS, f"{block.where}: unknown marks {block.marks}"
        if "not run" in block.marks:
            assert block.lang in RUN, f"{block.where}: only a program or a command is run"
            assert len(block.marks["not run"]) > 10, f"{block.where}: say why it is not run"
        if "run by" in block.marks:
            test = ROOT / block.marks["run by"]
            assert test.is_file(), f"{block.where}: no {test}"
            assert str(block.page) in test.read_text(), f"{block.where}: {test} names no page"
        if "model" in block.marks:
            assert hasattr(models, block.marks["model"].replace("-", "_")), block.where


def test_how_many_blocks_run_and_why_the_others_do_not() -> None:
    """Printed with -s: the count the documentation's promise rests on."""
    blocks = [block for block in all_blocks() if block.lang in {"python", "sh", "bash", "console"}]
    elsewhere = [b for b in blocks if "run by" in b.marks]
    skipped = [b for b in blocks if "not run" in b.marks]
    ran = sum(b.runs for b in blocks)
    print(f"\n{len(blocks)} blocks: {ran} run here, {len(elsewhere)} by other tests, ", end="")
    print(f"{len(skipped)} not run:")
    for block in skipped:
        print(f"  {block.where}: {block.marks['not run']}")
    assert blocks
