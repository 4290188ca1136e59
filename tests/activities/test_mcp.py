"""MCP servers as tool providers, against a real MCP server (tests/mcp_server.py, written
with the `mcp` package's server API) over stdio and over streamable HTTP on loopback:
the tools and their destructive hint, a tool whose schema is not JSON Schema skipped,
calls, the server's errors as the model's observation, a server that is down or crashes
as a transient error the next call recovers from, except for a destructive call that
may have run, no leaked processes, the `--mcp` configuration, and ReActWorkflow on a
worker with an MCP server (its tools named `notes__TOOL`, the destructive one asked)."""

from __future__ import annotations

import asyncio
import logging
import os
import shlex
import signal
import socket
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from temporalio.client import Client, WorkflowHandle
from temporalio.exceptions import ApplicationError

from durafact._activities.mcp import (
    IDEMPOTENCY_META_KEY,
    McpConfigError,
    McpServer,
    McpToolError,
    configured_servers,
    parse_server,
)
from durafact._activities.tools import ToolCatalog, ToolSessionLost, ToolUnavailable
from durafact._core.approval import ApprovalAnswer
from durafact._core.react import ToolList
from durafact._core.tools import ToolCall, ToolRequest
from durafact._recipes import ReActInput, ReActResult, ReActWorkflow, ToolCallRecord
from durafact._runtime.settings import Settings
from durafact._runtime.worker import build_worker
from durafact.testing import Call, ScriptedModel, ToolCalls
from tests.helpers import (
    DURAFACT_WORKER,
    ROOT,
    clean_env,
    free_port,
    ledger_of,
    question_waiting,
    run_command,
    scheduled_activities,
    start_worker,
)

SERVER = ROOT / "tests" / "mcp_server.py"
RAW_SERVER = ROOT / "tests" / "mcp_raw_server.py"
TOOLS = {
    "add",
    "read_note",
    "fail",
    "delete_note",
    "count",
    "idempotency_key",
    "crash",
    "purge",
    "archive",
    "crash_mid_call",
}
DESTRUCTIVE = ["delete_note", "purge", "archive"]
# Listed by the server, skipped by the client: its schema is not JSON Schema.
MISDESCRIBED = "misdescribed"


def stdio_server(*args: str, name: str = "notes") -> McpServer:
    return McpServer(name, command=[sys.executable, str(SERVER), *args])


def server_processes(parent: int | None = None) -> list[int]:
    """The stdio test server processes that `parent` (this process) started."""
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            cmdline = (entry / "cmdline").read_bytes().decode(errors="replace")
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        if ppid == (parent or os.getpid()) and str(SERVER) in cmdline and "--http" not in cmdline:
            pids.append(int(entry.name))
    return pids


@contextmanager
def http_server(port: int) -> Iterator[str]:
    """The test server over streamable HTTP on 127.0.0.1:port, until the block ends."""
    process = subprocess.Popen(
        [sys.executable, str(SERVER), "--http", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 30
        while True:
            assert process.poll() is None, "the MCP HTTP server exited"
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                assert time.monotonic() < deadline, "the MCP HTTP server never listened"
                time.sleep(0.05)
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        process.terminate()
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


@pytest.fixture(scope="module")
def http_url() -> Iterator[str]:
    with http_server(free_port()) as url:
        yield url


@pytest.fixture(params=["stdio", "http"])
async def notes(request: pytest.FixtureRequest) -> AsyncIterator[McpServer]:
    if request.param == "stdio":
        server = stdio_server()
    else:
        server = McpServer("notes", url=request.getfixturevalue("http_url"))
    async with server:
        yield server


# --- one server, both transports ---------------------------------------------------------


async def test_tools_are_listed_with_schemas_and_the_destructive_hint(notes: McpServer) -> None:
    specs = {spec.name: spec for spec in await notes.specs()}
    assert set(specs) == TOOLS
    assert specs["add"].description == "Add two numbers."
    assert specs["add"].parameters["required"] == ["a", "b"]
    assert specs["add"].parameters["properties"]["a"]["type"] == "number"
    assert [name for name, spec in specs.items() if spec.destructive] == DESTRUCTIVE


async def test_a_tool_whose_schema_is_not_json_schema_is_skipped_with_a_warning(
    notes: McpServer, caplog: pytest.LogCaptureFixture
) -> None:
    """A model endpoint refuses such a tool, or fails on it at every attempt: it is not
    listed, the way a tool whose name no model accepts is not."""
    with caplog.at_level(logging.WARNING, logger="durafact.mcp"):
        specs = await notes.specs()
    assert MISDESCRIBED not in {spec.name for spec in specs}
    (skipped,) = notes.skipped
    assert skipped.name == MISDESCRIBED
    assert skipped.reason.startswith("its input schema is not JSON Schema: properties.when.type:")
    assert f"tool {MISDESCRIBED!r} skipped: its input schema is not JSON Schema" in caplog.text


async def test_a_tool_list_the_sdk_refuses_whole_fails_at_once_naming_the_problem() -> None:
    """A schema whose root is not an object schema: the SDK refuses the whole list, so no
    tool can be skipped alone, and asking again would get the same answer until the
    run's deadline."""
    async with McpServer("raw", command=[sys.executable, str(RAW_SERVER)]) as raw:
        with pytest.raises(ApplicationError) as raised:
            await ToolCatalog(providers={"raw": raw}).specs(["raw"])
    assert (raised.value.type, raised.value.non_retryable) == ("InvalidToolList", True)
    assert raised.value.message.startswith(
        "MCP server raw: its tool list is not valid MCP, so none of its tools can be offered: "
        "tools.1.inputSchema."
    )


async def test_a_call_returns_what_the_tool_says(notes: McpServer) -> None:
    assert await notes.call("add", {"a": 2, "b": 3}, "wf:c1") == "5.0"
    assert await notes.call("read_note", {"name": "groceries"}, "wf:c2") == "milk, eggs, bread"


async def test_a_tool_that_fails_raises_the_servers_message(notes: McpServer) -> None:
    with pytest.raises(McpToolError, match="kaput"):
        await notes.call("fail", {"message": "kaput"}, "wf:c1")
    with pytest.raises(McpToolError, match="no note named 'shopping'; notes: groceries, todo"):
        await notes.call("read_note", {"name": "shopping"}, "wf:c2")
    # The session survives a tool's failure.
    assert await notes.call("add", {"a": 1, "b": 1}, "wf:c3") == "2.0"


async def test_the_idempotency_key_reaches_the_server(notes: McpServer) -> None:
    assert await notes.call("idempotency_key", {}, "wf-7:call-3") == "wf-7:call-3"
    assert IDEMPOTENCY_META_KEY == "durafact/idempotency-key"


async def test_every_call_goes_to_one_session(notes: McpServer) -> None:
    """A server that keeps state between calls sees one client, calls in parallel too."""
    first = int(await notes.call("count", {}, "k"))
    counts = await asyncio.gather(*(notes.call("count", {}, "k") for _ in range(5)))
    assert sorted(int(c) for c in counts) == list(range(first + 1, first + 6))


async def test_the_catalog_names_and_runs_the_servers_tools(notes: McpServer) -> None:
    catalog = ToolCatalog(providers={"notes": notes})
    specs = await catalog.specs(["notes"])
    assert {spec.name for spec in specs} == {f"notes__{name}" for name in TOOLS}
    assert [s.name for s in specs if s.destructive] == [f"notes__{n}" for n in DESTRUCTIVE]
    assert [s.name for s in await catalog.specs(["notes__add"])] == ["notes__add"]

    def request(name: str, arguments: dict | str) -> ToolRequest:
        call = ToolCall(id="c1", name=name, arguments=arguments)
        return ToolRequest(call=call, idempotency_key="wf:c1")

    added = await catalog.call(request("notes__add", '{"a": 2, "b": 40}'))
    assert (added.ok, added.content) == (True, "42.0")
    failed = await catalog.call(request("notes__fail", {"message": "disk full"}))
    assert (failed.ok, failed.error_type) == (False, "ToolError")
    assert "disk full" in failed.content
    unknown = await catalog.call(request("notes__nope", {}))
    assert (unknown.ok, unknown.error_type) == (False, "UnknownTool")
    assert "notes__add" in unknown.content


# --- failures that pass by themselves ----------------------------------------------------


async def test_a_server_that_is_down_is_a_transient_error() -> None:
    async with McpServer("down", url=f"http://127.0.0.1:{free_port()}/mcp") as down:
        with pytest.raises(ToolUnavailable, match=r"MCP server down \(http://127.0.0.1:\d+/mcp\)"):
            await down.specs()
        with pytest.raises(ApplicationError) as raised:
            await ToolCatalog(providers={"down": down}).specs(["down"])
        assert raised.value.type == "ToolUnavailable"
        assert not raised.value.non_retryable
    exits = McpServer("exits", command=[sys.executable, "-c", "raise SystemExit(3)"])
    async with exits:
        with pytest.raises(ToolUnavailable, match="MCP server exits .* is unavailable"):
            await exits.call("add", {"a": 1, "b": 2}, "k")


async def test_a_crashed_stdio_server_is_transient_and_the_next_call_starts_it_again() -> None:
    async with stdio_server() as notes:
        assert await notes.call("count", {}, "k") == "1"
        with pytest.raises(ToolUnavailable, match="calling crash"):
            await notes.call("crash", {}, "k")
        assert await notes.call("count", {}, "k") == "1"  # a new process
        assert len(server_processes()) == 1
    assert server_processes() == []


async def test_a_crash_fails_the_calls_in_flight_and_only_repeatable_ones_are_retried(
    tmp_path: Path,
) -> None:
    """Three calls share the session; the third ends the process once the other two are
    held. A destructive call that is not idempotent may have run, so it must not be sent
    again; the idempotent one and the harmless one are retried as before."""
    record = tmp_path / "record"
    async with stdio_server("--record", str(record)) as notes:
        purged, archived, crashed = await asyncio.gather(
            notes.call("purge", {"name": "todo"}, "wf:purge"),
            notes.call("archive", {"name": "todo"}, "wf:archive"),
            notes.call("crash_mid_call", {"calls": 2}, "wf:crash"),
            return_exceptions=True,
        )
        assert isinstance(purged, ToolSessionLost)
        assert "purge may or may not have run" in str(purged)
        assert isinstance(archived, ToolUnavailable)
        assert isinstance(crashed, ToolUnavailable)
        # Temporal's retry: a new process, the same idempotency key.
        assert await notes.call("archive", {"name": "todo"}, "wf:archive") == "archived todo"
    assert sorted(record.read_text().splitlines()) == [
        "archive todo wf:archive",
        "archive todo wf:archive",
        "crashed",
        "purge todo wf:purge",
    ]


async def test_an_http_server_that_restarts_is_transient_and_the_next_call_reconnects() -> None:
    port = free_port()
    async with McpServer("notes", url=f"http://127.0.0.1:{port}/mcp") as notes:
        with http_server(port):
            assert await notes.call("add", {"a": 1, "b": 2}, "k") == "3.0"
        # The first call on the session of a server that is gone. Nothing was sent: a
        # destructive call that must not run twice waits for the server like any other.
        with pytest.raises(ToolUnavailable):
            await notes.call("delete_note", {"name": "todo"}, "k")
        with pytest.raises(ToolUnavailable):
            await notes.call("add", {"a": 1, "b": 2}, "k")
        with http_server(port):
            assert await notes.call("add", {"a": 1, "b": 2}, "k") == "3.0"


async def test_tools_are_listed_once_and_closing_ends_the_process() -> None:
    notes = stdio_server()
    assert len(await notes.specs()) == len(TOOLS)
    assert len(server_processes()) == 1
    await notes.aclose()
    assert server_processes() == []
    assert len(await notes.specs()) == len(TOOLS)  # from the cache: no process started
    assert server_processes() == []


# --- configuration -----------------------------------------------------------------------


def test_a_command_is_split_like_a_shell_and_a_url_is_streamable_http() -> None:
    stdio = parse_server(f"notes={sys.executable} tests/mcp_server.py --title 'my notes'")
    assert (stdio.name, stdio.command, stdio.url) == (
        "notes",
        [sys.executable, "tests/mcp_server.py", "--title", "my notes"],
        None,
    )
    http = parse_server("search=https://user:secret@mcp.example.com:8443/mcp?token=x")
    assert (http.command, http.url) == (
        None,
        "https://user:secret@mcp.example.com:8443/mcp?token=x",
    )
    assert http.target == "https://mcp.example.com:8443/mcp"  # no credentials in messages


def test_servers_come_from_options_and_the_environment() -> None:
    servers = configured_servers(
        ["a=http://127.0.0.1:1/mcp"], "b=http://127.0.0.1:2/mcp; c = cat ;"
    )
    assert {name: s.url or s.command for name, s in servers.items()} == {
        "a": "http://127.0.0.1:1/mcp",
        "b": "http://127.0.0.1:2/mcp",
        "c": ["cat"],
    }
    assert configured_servers([], None) == {}


@pytest.mark.parametrize(
    ("value", "says"),
    [
        ("notes", "expected NAME=COMMAND or NAME=http(s)://URL"),
        ("=cat", "expected NAME=COMMAND or NAME=http(s)://URL"),
        ("notes=", "expected NAME=COMMAND or NAME=http(s)://URL"),
        ("my__notes=cat", "the name 'my__notes' must be letters, digits, _ and -"),
        ("my notes=cat", "the name 'my notes' must be letters, digits, _ and -"),
        ("notes=ws://127.0.0.1/mcp", "only http(s) URLs (streamable HTTP) or a command"),
        ("notes=http://:80/mcp", "the URL has no host"),
        ("notes=http://h:port/mcp", "Port could not be cast"),
        ("notes=cat 'unclosed", "No closing quotation"),
        ("notes=no-such-command-here --stdio", "'no-such-command-here' is not an executable"),
    ],
)
def test_a_bad_value_is_one_line_naming_it(value: str, says: str) -> None:
    with pytest.raises(McpConfigError) as raised:
        parse_server(value)
    message = str(raised.value)
    assert message.startswith(f"--mcp {value!r}: ")
    assert says in message
    assert "\n" not in message


def test_a_name_given_twice_is_an_error() -> None:
    with pytest.raises(McpConfigError, match="DURAFACT_MCP 'a=cat': the server 'a' is named twice"):
        configured_servers(["a=http://127.0.0.1:1/mcp"], "a=cat")


@pytest.mark.parametrize(
    ("args", "env", "line"),
    [
        (["--mcp", "notes"], {}, "worker: --mcp 'notes': expected NAME=COMMAND or"),
        ([], {"DURAFACT_MCP": "a__b=cat"}, "worker: DURAFACT_MCP 'a__b=cat': the name 'a__b'"),
    ],
)
async def test_the_worker_refuses_a_bad_mcp_value_before_connecting(
    args: list[str], env: dict[str, str], line: str, tmp_path: Path
) -> None:
    # Nothing listens at this address: a worker that tried to connect would say so.
    environment = clean_env(TEMPORAL_ADDRESS=f"127.0.0.1:{free_port()}", **env)
    run = await run_command(*DURAFACT_WORKER, *args, env=environment, cwd=tmp_path)
    assert run.code == 2
    assert len(run.err_lines) == 1
    assert run.err_lines[0].startswith(line)


# --- through a worker ----------------------------------------------------------------------


@pytest.fixture
def record(tmp_path: Path) -> Path:
    """Where the worker's MCP server records held calls and crashes."""
    return tmp_path / "record"


@pytest.fixture
async def mcp_worker(client: Client, settings: Settings, record: Path) -> AsyncIterator[Settings]:
    async with (
        stdio_server("--record", str(record)) as notes,
        build_worker(client, settings, mcp=[notes]),
    ):
        yield settings
    assert server_processes() == []


def by_turn(*replies: str | ToolCalls) -> Callable[[Call], str | ToolCalls]:
    """Reply n answers the model call of turn n."""

    def reply(call: Call) -> str | ToolCalls:
        return replies[int(call.activity_id.rsplit(":", 1)[-1]) - 1]

    return reply


async def start_react(client: Client, settings: Settings, **kw: Any) -> WorkflowHandle:
    return await client.start_workflow(
        ReActWorkflow.run,
        ReActInput(tools=[], mcp_servers=["notes"], **kw),
        id=f"react-mcp-{time.monotonic_ns()}",
        task_queue=settings.task_queue,
    )


async def test_a_workflow_calls_mcp_tools_by_server_and_name(
    client: Client, mcp_worker: Settings, model: ScriptedModel
) -> None:
    model.reply(
        by_turn(
            ToolCalls([("notes__add", {"a": 2, "b": 3}), ("notes__fail", {"message": "no disk"})]),
            "5",
        )
    )
    handle = await start_react(client, mcp_worker, question="2 + 3?", protocol="native")
    result: ReActResult = await asyncio.wait_for(handle.result(), 60)
    assert (result.ending, result.answer) == ("answer", "5")
    first, second = model.calls_for("llm:react:")
    assert set(first.tool_names) == {f"notes__{name}" for name in TOOLS}
    observations = [m["content"] for m in second.messages if m["role"] == "tool"]
    assert observations[0] == "5.0"
    assert "no disk" in observations[1]
    assert [(c.ok, c.error_type) for c in result.tool_calls] == [(True, None), (False, "ToolError")]


async def test_a_destructive_mcp_tool_waits_for_a_person(
    client: Client, mcp_worker: Settings, model: ScriptedModel
) -> None:
    model.reply(
        by_turn(
            "Thought: remove it.\nAction: notes__delete_note\n"
            'Action Input: {"name": "todo"}\nPAUSE',
            "Thought: done.\nFinal Answer: deleted",
        )
    )
    handle = await start_react(client, mcp_worker, question="Delete the todo note")
    question = await question_waiting(handle, 1)
    assert "notes__delete_note" in question.text
    await handle.execute_update(
        ReActWorkflow.decide, ApprovalAnswer(question_id=question.id, approved=True, by="ops")
    )
    result: ReActResult = await asyncio.wait_for(handle.result(), 60)
    assert result.answer == "deleted"
    assert model.calls_for("llm:react:")[1].last_user == "Observation: deleted todo"


async def test_a_runs_tool_list_names_the_tools_skipped_and_why(
    client: Client, mcp_worker: Settings, model: ScriptedModel
) -> None:
    model.reply(by_turn("nothing to do"))
    handle = await start_react(client, mcp_worker, question="Anything?", protocol="native")
    result: ReActResult = await asyncio.wait_for(handle.result(), 60)
    assert result.answer == "nothing to do"
    (call,) = model.calls_for("llm:react:")
    assert set(call.tool_names) == {f"notes__{name}" for name in TOOLS}
    tools = (await ledger_of(handle)).find(ToolList)
    assert tools is not None
    (skipped,) = tools.data.skipped
    assert skipped.name == f"notes__{MISDESCRIBED}"
    assert skipped.reason.startswith("its input schema is not JSON Schema: ")
    # An MCP server is listed over the network by an activity of its own, which heartbeats
    # (Python tools alone are listed by a local activity: tests/workflows/test_react.py).
    (listing, *_) = await scheduled_activities(client, handle)
    assert listing.activity_id == "tools:Anything?"


async def test_a_crash_in_one_run_never_sends_another_runs_approved_purge_twice(
    client: Client, mcp_worker: Settings, model: ScriptedModel, record: Path
) -> None:
    """Two runs share the worker's one session with the server. Run A's purge
    (destructive, approved) is in flight when run B's call ends the server's process:
    A's model is told the purge may or may not have run, and it ran once."""
    purge = "Purge the todo note"

    def reply(call: Call) -> str | ToolCalls:
        turn = int(call.activity_id.rsplit(":", 1)[-1])
        if purge in call.text:
            return [ToolCalls([("notes__purge", {"name": "todo"})]), "check the notes"][turn - 1]
        return [ToolCalls([("notes__crash_mid_call", {})]), "crashed"][turn - 1]

    model.reply(reply)
    purging = await start_react(client, mcp_worker, question=purge, protocol="native")
    question = await question_waiting(purging, 1)
    crashing = await start_react(client, mcp_worker, question="Crash it", protocol="native")
    await purging.execute_update(
        ReActWorkflow.decide, ApprovalAnswer(question_id=question.id, approved=True, by="ops")
    )
    purged: ReActResult = await asyncio.wait_for(purging.result(), 60)
    crashed: ReActResult = await asyncio.wait_for(crashing.result(), 60)

    purges = [line for line in record.read_text().splitlines() if line.startswith("purge ")]
    assert len(purges) == 1
    assert purges[0].startswith(f"purge todo {purging.id}:")
    assert [(c.tool, c.ok, c.error_type) for c in purged.tool_calls] == [
        ("notes__purge", False, "ToolSessionLost")
    ]
    assert purged.answer == "check the notes"
    told = [
        m["content"]
        for call in model.calls_for("llm:react:")
        if purge in call.text
        for m in call.messages
        if m["role"] == "tool"
    ]
    assert len(told) == 1
    assert "may or may not have run" in told[0]
    # The call that crashed the server is harmless: retried on a new process.
    assert crashed.tool_calls == [
        ToolCallRecord(id=crashed.tool_calls[0].id, tool="notes__crash_mid_call", ok=True)
    ]


async def test_worker_py_serves_mcp_tools_and_ends_the_server_when_it_stops(
    client: Client, settings: Settings, model: ScriptedModel, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DURAFACT_MCP", f"notes={shlex.join([sys.executable, str(SERVER)])}")
    worker = start_worker(client, settings)
    try:
        model.reply(by_turn(ToolCalls([("notes__count", {})]), "counted once"))
        handle = await start_react(client, settings, question="Count", protocol="native")
        result: ReActResult = await asyncio.wait_for(handle.result(), 60)
        assert (result.answer, [c.ok for c in result.tool_calls]) == ("counted once", [True])
        (server,) = server_processes(worker.pid)
        worker.send_signal(signal.SIGTERM)
        assert await asyncio.to_thread(worker.wait, 30) == 0
        assert not Path(f"/proc/{server}").exists()
    finally:
        if worker.poll() is None:
            worker.kill()
            worker.wait()
