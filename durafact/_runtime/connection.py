"""Connecting to Temporal.

Where to connect is read by `Settings.from_env` through `temporalio.envconfig`
(`TEMPORAL_ADDRESS`, `TEMPORAL_NAMESPACE`, `TEMPORAL_API_KEY`, `TEMPORAL_TLS*`,
`TEMPORAL_PROFILE`, `TEMPORAL_CONFIG_FILE`); `connect` turns it into a client with
`DurafactPlugin` (its data converter: pydantic, the payload codec when `DURAFACT_KEYS`
or `DURAFACT_KEYS_FILE` configure keys, the payload store), or a one-line reason it
cannot.
"""

from __future__ import annotations

import asyncio
import os
import socket
from collections.abc import Mapping
from typing import Any

from temporalio.client import Client

from durafact._runtime.plugin import DurafactPlugin
from durafact._runtime.settings import Settings, SettingsError

CONNECT_TIMEOUT = 10.0


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
    settings: Settings, timeout: float = CONNECT_TIMEOUT, env: Mapping[str, str] | None = None
) -> Client:
    """A client for the configured server and namespace, with the data converter
    for the keys `env` (default: this process's environment) configures; raises
    Unreachable, or CodecConfigError for unusable keys, with a one-line reason."""
    plugin = DurafactPlugin(env=env)  # Codec/Payload/TracingConfigError: one line
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
