"""`durafact serve [--host H] [--port P] [--allow-host HOST ...]`: this front door, the
HTTP API and the web console, on uvicorn, on 127.0.0.1:8000 by default. The command
line reads the arguments and runs it (durafact/_main.py joins the two doors).

It connects like every other command (envconfig profile, codec keys, payload store,
the embedded stack when nothing is configured: the `connect` it is given) and starts
runs on the task queue the settings name. A non-loopback address needs
`DURAFACT_API_TOKEN`: without one, anyone who reaches it could start and approve runs,
so `serve` refuses in one line. It answers only requests that name it (sites.py): a
name it is reached by besides the loopback names and its address (a reverse proxy's)
is allowed with `--allow-host` or `DURAFACT_API_ALLOW_HOSTS`. The port is taken before
connecting, so a port in use or a host that does not resolve is one line, and starts
nothing.
"""

from __future__ import annotations

import asyncio
import os
import socket
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any

import uvicorn

from durafact._api.app import create_app
from durafact._api.security import TOKEN_ENV, check_bind
from durafact._api.sites import ALLOW_HOSTS_ENV, allowed_hosts
from durafact._runtime.registry import Registry
from durafact._service.errors import Invalid, ServiceError


@dataclass(frozen=True)
class Serving:
    """Where and for whom `serve` answers: the address, the token (or None), and the
    hosts it is allowed to be reached by besides its own."""

    host: str
    port: int
    token: str | None
    allow_hosts: tuple[str, ...]


def check_serving(host: str, port: int, allow_hosts: Sequence[str]) -> Serving:
    """What to serve; Invalid for an address that must not be served without a token
    (DURAFACT_API_TOKEN), a port that is not one, or an allowed host that is not a host."""
    if not 0 < port < 65536:
        raise Invalid(f"--port {port} is not a port number")
    token = os.environ.get(TOKEN_ENV)
    refusal = check_bind(host, token)
    if refusal:
        raise Invalid(refusal)
    try:
        allowed = allowed_hosts(allow_hosts, os.environ.get(ALLOW_HOSTS_ENV))
    except ValueError as exc:
        raise Invalid(str(exc)) from None
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
        raise ServiceError(f"cannot serve on {host}:{port}: {exc.strerror or exc}") from None
    return sock


async def serve(
    host: str,
    port: int,
    allow_hosts: Sequence[str],
    registry: Registry,
    connect: Callable[[], Awaitable[tuple[Any, Any]]],
    say: Callable[[str], None],
) -> int:
    """Serve until interrupted (SIGINT, SIGTERM): checked and listening before
    `connect` gives the client and the settings; `say` tells where."""
    serving = check_serving(host, port, allow_hosts)
    sock = listening(serving.host, serving.port)
    client, settings = await connect()
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
        shown = f"[{serving.host}]" if ":" in serving.host else serving.host
        queue = settings.task_queue
        say(f"console: http://{shown}:{serving.port}/ (API docs: /docs; task queue {queue!r})")
        if serving.token:
            say("every API call needs `Authorization: Bearer $DURAFACT_API_TOKEN`")
    await running
    if not server.started:  # uvicorn said why, and gave up
        raise ServiceError(f"cannot serve on {serving.host}:{serving.port}")
    return 0
