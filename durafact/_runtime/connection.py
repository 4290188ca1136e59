"""Connecting to Temporal.

Where to connect is read by `Settings.from_env` through `temporalio.envconfig`
(`TEMPORAL_ADDRESS`, `TEMPORAL_NAMESPACE`, `TEMPORAL_API_KEY`, `TEMPORAL_TLS*`,
`TEMPORAL_PROFILE`, `TEMPORAL_CONFIG_FILE`); `connect` turns it into a client with
`DurafactPlugin` (its data converter: pydantic, the payload codec when `DURAFACT_KEYS`
or `DURAFACT_KEYS_FILE` configure keys, the payload store), or a one-line reason it
cannot. `connect_ready` also readies the namespace (durafact's search attributes), and
`has_live_poller` tells whether a worker polls a queue: any server's, embedded or not.
"""

from __future__ import annotations

import asyncio
import os
import socket
from collections.abc import Callable, Mapping
from datetime import UTC, datetime, timedelta
from typing import Any

from temporalio.client import Client

from durafact._runtime.codec import converter_for
from durafact._runtime.plugin import DurafactPlugin
from durafact._runtime.search_attributes import (
    ensure_search_attributes,
    may_register,
    registered_message,
)
from durafact._runtime.settings import Settings, SettingsError

CONNECT_TIMEOUT = 10.0
# A live worker re-polls at least every ~70 s (the long-poll timeout); a poller the
# server saw longer ago than this has gone away.
POLLER_FRESHNESS = timedelta(minutes=2)


class Unreachable(SettingsError):
    """A one-line reason no client could be made for the configured server."""


def port_open(address: str, timeout: float = 0.5) -> bool:
    """Whether something accepts TCP connections at `host:port`."""
    host, _, port = address.rpartition(":")
    try:
        with socket.create_connection((host.strip("[]") or "localhost", int(port)), timeout):
            return True
    except (OSError, ValueError):
        return False


def connect_options(settings: Settings) -> dict[str, Any]:
    """Keyword arguments of `Client.connect` for `settings` (TLS files are read here)."""
    options: dict[str, Any] = dict(settings.temporal_profile.to_client_connect_config())
    options["target_host"] = settings.temporal_address
    options["namespace"] = settings.temporal_namespace
    return options


async def connect(
    settings: Settings,
    timeout: float = CONNECT_TIMEOUT,
    env: Mapping[str, str] | None = None,
    *,
    worker: bool = False,
) -> Client:
    """A client for the configured server and namespace, with the data converter
    for the keys `env` (default: this process's environment) configures; raises
    Unreachable, or CodecConfigError for unusable keys, with a one-line reason. A
    client that only reads runs (not a `worker`'s) says in one line which key an
    encrypted payload needs, even without keys (`converter_for`)."""
    plugin = DurafactPlugin(env=env)  # Codec/Payload/TracingConfigError: one line
    if not worker:
        plugin.data_converter_value = converter_for(plugin.keys, plugin.payloads, explain=True)
    address, source = settings.temporal_address, settings.temporal_address_source
    if settings.temporal_address_explicit and not port_open(address, timeout=3):
        raise Unreachable(f"cannot reach Temporal at {address} ({source})")
    try:
        options = connect_options(settings)
    except OSError as exc:  # a TLS certificate or key file
        raise Unreachable(
            f"cannot read {exc.filename}: {exc.strerror} (TLS settings for {address})"
        ) from None
    try:
        return await asyncio.wait_for(Client.connect(**options, plugins=[plugin]), timeout)
    except (RuntimeError, TimeoutError) as exc:
        reason = " ".join(str(exc).split()) or f"no answer within {timeout:.0f}s"
        if "InvalidContentType" in reason:  # rustls: the answer to its hello was not TLS
            reason = plain_server(settings, os.environ if env is None else env)
        raise Unreachable(f"cannot reach Temporal at {address} ({source}): {reason}") from None


async def connect_ready(
    settings: Settings, note: Callable[[str], None], env: Mapping[str, str] | None = None
) -> Client:
    """`connect`, on a namespace ready for durafact workflows: its search attributes
    registered when missing (`note` says so), or NamespaceNotReady."""
    client = await connect(settings, env=env)
    registered = await ensure_search_attributes(client, register=may_register(env))
    if registered:
        note(registered_message(registered, client.namespace))
    return client


async def has_live_poller(
    client: Client, namespace: str, task_queue: str, identity_prefix: str = ""
) -> bool:
    """Whether a worker (optionally one whose identity starts with `identity_prefix`)
    polls `task_queue` for workflow tasks."""
    from temporalio.api.enums.v1 import TaskQueueType
    from temporalio.api.taskqueue.v1 import TaskQueue
    from temporalio.api.workflowservice.v1 import DescribeTaskQueueRequest

    response = await client.workflow_service.describe_task_queue(
        DescribeTaskQueueRequest(
            namespace=namespace,
            task_queue=TaskQueue(name=task_queue),
            task_queue_type=TaskQueueType.TASK_QUEUE_TYPE_WORKFLOW,
        ),
        timeout=timedelta(seconds=5),
    )
    now = datetime.now(UTC)
    for poller in response.pollers:
        seen = poller.last_access_time.ToDatetime(tzinfo=UTC)
        if now - seen < POLLER_FRESHNESS and poller.identity.startswith(identity_prefix):
            return True
    return False


def plain_server(settings: Settings, env: Mapping[str, str]) -> str:
    """Why TLS is on against a server that speaks plain gRPC, and how to turn it off."""
    profile = settings.temporal_profile
    if profile.api_key and profile.tls is None:  # envconfig: an API key turns TLS on
        key = "TEMPORAL_API_KEY" if env.get("TEMPORAL_API_KEY") else "the profile's api_key"
        return (
            f"{key} turns TLS on, and this server speaks plain gRPC: unset it, or set "
            "TEMPORAL_TLS=false to send the key without TLS"
        )
    return "TLS is on, and this server speaks plain gRPC: set TEMPORAL_TLS=false"
