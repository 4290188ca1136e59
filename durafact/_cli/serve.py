"""`durafact serve [--host H] [--port P] [--allow-host HOST ...]`: the HTTP API and the
web console (durafact/_api/) on uvicorn, on 127.0.0.1:8000 by default.

It connects like every other command (envconfig profile, codec keys, payload store,
the embedded stack when nothing is configured) and starts runs on the task queue the
settings name. A non-loopback address needs `DURAFACT_API_TOKEN`: without one, anyone
who reaches it could start and approve runs, so `serve` refuses in one line. It answers
only requests that name it (durafact/_api/sites.py): a name it is reached by besides the
loopback names and its address (a reverse proxy's) is allowed with `--allow-host` or
`DURAFACT_API_ALLOW_HOSTS`. The port is taken before connecting, so a port in use or a
host that does not resolve is one line, and starts nothing.
"""

from __future__ import annotations

import asyncio
import os
import socket
from dataclasses import dataclass
from typing import Any

from durafact._cli.output import Failed, say
from durafact._runtime.registry import Registry
from durafact._runtime.settings import Settings


@dataclass(frozen=True)
class Serving:
    """Where and for whom `serve` answers: the address, the token (or None), and the
    hosts it is allowed to be reached by besides its own."""

    host: str
    port: int
    token: str | None
    allow_hosts: tuple[str, ...]


def check_serve_args(host: str, port: int, allow_hosts: list[str]) -> Serving:
    """What to serve; a one-line refusal (exit code 2) for an address that must not be
    served without a token (DURAFACT_API_TOKEN), a port that is not one, or an allowed
    host that is not a host."""
    from durafact._api.security import TOKEN_ENV, check_bind
    from durafact._api.sites import ALLOW_HOSTS_ENV, allowed_hosts

    if not 0 < port < 65536:
        raise Failed(f"--port {port} is not a port number", code=2)
    token = os.environ.get(TOKEN_ENV)
    refusal = check_bind(host, token)
    if refusal:
        raise Failed(refusal, code=2)
    try:
        allowed = allowed_hosts(allow_hosts, os.environ.get(ALLOW_HOSTS_ENV))
    except ValueError as exc:
        raise Failed(str(exc), code=2) from None
    return Serving(host, port, token, allowed)


def listening(host: str, port: int) -> socket.socket:
    """A socket listening on host:port; a one-line reason when the port is in use or
    the host does not resolve (both OSErrors)."""
    sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as uvicorn does
        sock.bind((host, port))
        sock.listen()
    except OSError as exc:
        sock.close()
        raise Failed(f"cannot serve on {host}:{port}: {exc.strerror or exc}") from None
    return sock


async def serve(
    client: Any, settings: Settings, registry: Registry, serving: Serving, sock: socket.socket
) -> int:
    """Serve on `sock` until interrupted (SIGINT, SIGTERM)."""
    # Imported here: the other commands never pay for importing the web stack.
    import uvicorn

    from durafact._api import create_app

    app = create_app(
        client,
        settings,
        registry,
        token=serving.token,
        host=serving.host,
        allow_hosts=serving.allow_hosts,
    )
    config = uvicorn.Config(app, log_level="warning", access_log=False)
    server = uvicorn.Server(config)
    running = asyncio.create_task(server.serve(sockets=[sock]))
    while not server.started and not running.done():
        await asyncio.sleep(0.05)
    if server.started:
        host = f"[{serving.host}]" if ":" in serving.host else serving.host
        queue = settings.task_queue
        say(f"console: http://{host}:{serving.port}/ (API docs: /docs; task queue {queue!r})")
        if serving.token:
            say("every API call needs `Authorization: Bearer $DURAFACT_API_TOKEN`")
    await running
    if not server.started:  # uvicorn said why, and gave up
        raise Failed(f"cannot serve on {serving.host}:{serving.port}")
    return 0
