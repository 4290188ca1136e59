"""What the embedded stack (`durafact up`, durafact/_local/embedded.py) has running, as its
state directory records it: one pid file a piece, `{"pid": ..., "argv": [...]}`.

A worker or a command that is not part of the stack reads it here, without importing
the stack itself (the `local` extra): your own worker with `DurafactPlugin` finds the
stack's local model as `durafact-worker` does, and a command pointed at the stack's
server by `TEMPORAL_ADDRESS` links to the Web UI on the port the stack gave it, and a
worker on the queue the stack's worker polls is warned that the two would take each
other's tasks. Only
what a pid file records and its process still runs counts: a recycled pid is never
taken for ours.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
from pathlib import Path
from typing import Any

LOCAL_MODEL_ID = "smollm2-135m-instruct"
LOOPBACK = ("localhost", "127.0.0.1", "::1", "[::1]")


def recorded(state_dir: Path, piece: str) -> tuple[int, list[str]] | None:
    """The pid and command line in the piece's pid file, if there is a readable one."""
    record = _record(state_dir, piece)
    return (record["pid"], record["argv"]) if record else None


def _record(state_dir: Path, piece: str) -> dict[str, Any] | None:
    try:
        data = json.loads((state_dir / f"{piece}.pid").read_text())
        return {**data, "pid": int(data["pid"]), "argv": [str(a) for a in data["argv"]]}
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None


def running(state_dir: Path, piece: str) -> list[str] | None:
    """The command line of the piece when the process its pid file names still runs it."""
    found = recorded(state_dir, piece)
    return found[1] if found and is_our_process(*found) else None


def worker_on(state_dir: Path, address: str, task_queue: str) -> int | None:
    """The pid of the stack's worker when it runs and polls `task_queue` of the server at
    `address` (another process: not this one)."""
    record = _record(state_dir, "worker")
    if not record or record["pid"] == os.getpid() or record.get("task_queue") != task_queue:
        return None
    if not same_server(str(record.get("address", "")), address):
        return None
    return record["pid"] if is_our_process(record["pid"], record["argv"]) else None


def same_server(a: str, b: str) -> bool:
    """Whether two `host:port` addresses name one server: the same port, and the same
    host or loopback both."""
    (host_a, _, port_a), (host_b, _, port_b) = a.rpartition(":"), b.rpartition(":")
    local = host_a.lower() in LOOPBACK and host_b.lower() in LOOPBACK
    return port_a == port_b and (local or host_a.lower() == host_b.lower())


def flag(argv: list[str], name: str) -> str | None:
    """The value of option `name` in a recorded command line."""
    return next((argv[i + 1] for i, a in enumerate(argv[:-1]) if a == name), None)


def local_model_url(state_dir: Path, default_port: int) -> str | None:
    """The /v1 URL of the local model `up` started, when it runs and answers: on the port
    its command line names (else `default_port`, DURAFACT_MODEL_PORT's)."""
    argv = running(state_dir, "model")
    if argv is None:
        return None
    url = f"http://127.0.0.1:{flag(argv, '--port') or default_port}/v1"
    return url if healthy(url.removesuffix("/v1") + "/health") else None


def ui_url(state_dir: Path, address: str) -> str | None:
    """The Web UI of the stack's dev server when that server is the one at `address`
    (a loopback host and the port it was started on)."""
    argv = running(state_dir, "temporal")
    host, _, port = address.rpartition(":")
    if argv is None or host.lower() not in LOOPBACK or flag(argv, "--port") != port:
        return None
    ui_port = flag(argv, "--ui-port")
    return f"http://localhost:{ui_port}" if ui_port else None


def healthy(url: str, timeout: float = 2.0) -> bool:
    """Whether `url` answers 200. Blocking, and on loopback only: it runs once, as a
    worker is made."""
    from urllib.error import URLError
    from urllib.request import urlopen

    try:
        with urlopen(url, timeout=timeout) as response:  # noqa: S310 - a loopback http URL
            return response.status == 200
    except (URLError, OSError, ValueError):
        return False


# --- processes ------------------------------------------------------------------------


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # A zombie (exited, not yet reaped by its new parent) is not running.
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        return stat.rpartition(")")[2].split()[0] != "Z"
    except (OSError, IndexError):
        return True


def command_line(pid: int) -> list[str] | str | None:
    with contextlib.suppress(OSError):
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
        return [a.decode(errors="replace") for a in raw.split(b"\0")[:-1]]
    try:  # no /proc (macOS): ask ps
        out = subprocess.run(
            ["ps", "-p", str(pid), "-o", "command="], capture_output=True, text=True, timeout=5
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() or None


def is_our_process(pid: int, argv: list[str]) -> bool:
    """Alive and running the recorded command: a recycled pid is never taken for ours."""
    if pid <= 1 or not alive(pid):
        return False
    actual = command_line(pid)
    if actual is None:
        return True  # nothing to compare with: liveness is all we can know
    if isinstance(actual, list):
        return actual == argv
    return all(Path(a).name in actual for a in argv[:2])
