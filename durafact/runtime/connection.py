"""Connecting to Temporal, and making sure a namespace can run durafact workflows.

Where to connect is read by `Settings.from_env` through `temporalio.envconfig`
(`TEMPORAL_ADDRESS`, `TEMPORAL_NAMESPACE`, `TEMPORAL_API_KEY`, `TEMPORAL_TLS*`,
`TEMPORAL_PROFILE`, `TEMPORAL_CONFIG_FILE`); `connect` turns it into a client with
the data converter of durafact/runtime/codec.py (pydantic, and the payload codec when
`DURAFACT_KEYS` or `DURAFACT_KEYS_FILE` configure keys), or a one-line reason it
cannot.

Every durafact workflow upserts the Keyword search attributes `DurafactRecipe` and
`DurafactStatus`. In a namespace without them each of its workflow tasks fails,
again and again, while the caller waits; so the starter calls
`ensure_search_attributes` before it starts anything (registering them through the
operator service unless `DURAFACT_REGISTER_SEARCH_ATTRIBUTES=0`), and the worker
calls `require_search_attributes` at startup. Both refuse with the exact
`temporal operator search-attribute create ...` command to run.
"""

from __future__ import annotations

import asyncio
import os
import shlex
import socket
from collections.abc import Mapping, Sequence
from datetime import timedelta
from typing import Any

from temporalio.api.enums.v1 import IndexedValueType
from temporalio.api.operatorservice.v1 import (
    AddSearchAttributesRequest,
    ListSearchAttributesRequest,
)
from temporalio.client import Client
from temporalio.service import RPCError, RPCStatusCode

from durafact.runtime.codec import data_converter
from durafact.runtime.settings import Settings, SettingsError
from workflows.recipe import SEARCH_ATTRIBUTES

REGISTER_ENV = "DURAFACT_REGISTER_SEARCH_ATTRIBUTES"
CONNECT_TIMEOUT = 10.0
RPC_TIMEOUT = timedelta(seconds=10)
# How long a registration may take to show in the namespace's list (a cluster's
# search-attribute cache can lag behind the call that changed it).
REGISTERED_TIMEOUT = 30.0
KEYWORD = IndexedValueType.INDEXED_VALUE_TYPE_KEYWORD
# Refusals of the operator service that mean "not for you" rather than "broken".
REFUSED = (
    RPCStatusCode.PERMISSION_DENIED,
    RPCStatusCode.UNIMPLEMENTED,
    RPCStatusCode.UNAUTHENTICATED,
)


class Unreachable(SettingsError):
    """A one-line reason no client could be made for the configured server."""


class NamespaceNotReady(SettingsError):
    """The namespace cannot run durafact workflows (it lacks their search attributes,
    or does not exist); the message says what to run."""


# --- connecting -----------------------------------------------------------------------


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
    converter = data_converter(env)
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
        return await asyncio.wait_for(Client.connect(**options, data_converter=converter), timeout)
    except (RuntimeError, TimeoutError) as exc:
        reason = " ".join(str(exc).split()) or f"no answer within {timeout:.0f}s"
        raise Unreachable(f"cannot reach Temporal at {address} ({source}): {reason}") from None


# --- search attributes ------------------------------------------------------------------

NAMES = tuple(key.name for key in SEARCH_ATTRIBUTES)


def create_command(names: Sequence[str], namespace: str) -> str:
    """The `temporal` CLI command that creates `names` as Keyword search attributes.

    The CLI reads the same TEMPORAL_* variables and profile, so in the same
    environment it reaches the same server."""
    # One --type per --name: with a single --type, the CLI creates only the first name.
    flags = " ".join(f"--name {name} --type Keyword" for name in names)
    return f"temporal operator search-attribute create --namespace {shlex.quote(namespace)} {flags}"


def missing_message(names: Sequence[str], namespace: str, why: str = "") -> str:
    """One line: what is missing, why it was not registered (if it was up to us), and
    the command that creates it."""
    listed = " and ".join(names)
    plural = len(names) > 1
    return (
        f"namespace {namespace!r} lacks the search attribute{'s' if plural else ''} {listed} "
        f"that durafact workflows set{f' ({why})' if why else ''}; create "
        f"{'them' if plural else 'it'} with: {create_command(names, namespace)}"
    )


def registered_message(names: Sequence[str], namespace: str) -> str:
    return (
        f"registered the search attribute{'s' if len(names) > 1 else ''} "
        f"{' and '.join(names)} in namespace {namespace!r}"
    )


def may_register(env: Mapping[str, str] | None = None) -> bool:
    """Whether the starter may register missing search attributes itself:
    yes unless DURAFACT_REGISTER_SEARCH_ATTRIBUTES is 0/false/no/off."""
    env = os.environ if env is None else env
    return (env.get(REGISTER_ENV) or "1").strip().lower() not in {"0", "false", "no", "off"}


async def missing_search_attributes(client: Client) -> list[str]:
    """durafact's search attributes that the client's namespace lacks.

    Raises NamespaceNotReady when one exists with another type than Keyword, or the
    namespace does not exist."""
    namespace = client.namespace
    try:
        response = await client.operator_service.list_search_attributes(
            ListSearchAttributesRequest(namespace=namespace), timeout=RPC_TIMEOUT
        )
    except RPCError as exc:
        if exc.status == RPCStatusCode.NOT_FOUND:
            raise NamespaceNotReady(f"namespace {namespace!r} does not exist") from None
        if exc.status in REFUSED:
            # Not allowed to list (some API keys): ask visibility, which rejects a
            # query on an attribute the namespace does not know.
            return [name for name in NAMES if not await _queryable(client, name)]
        raise
    known = {**response.system_attributes, **response.custom_attributes}
    wrong = {n: known[n] for n in NAMES if n in known and known[n] != KEYWORD}
    if wrong:
        name, kind = next(iter(wrong.items()))
        type_name = IndexedValueType.Name(kind).removeprefix("INDEXED_VALUE_TYPE_").title()
        raise NamespaceNotReady(
            f"search attribute {name} in namespace {namespace!r} is of type {type_name}; "
            "durafact workflows set it as a Keyword"
        )
    return [name for name in NAMES if name not in known]


async def _queryable(client: Client, name: str) -> bool:
    try:
        await client.count_workflows(f"{name} = ''", rpc_timeout=RPC_TIMEOUT)
    except RPCError as exc:
        if exc.status == RPCStatusCode.INVALID_ARGUMENT:
            return False
        if exc.status == RPCStatusCode.UNIMPLEMENTED:
            return True  # no visibility to ask (the time-skipping test server): cannot tell
        raise
    return True


async def ensure_search_attributes(client: Client, *, register: bool) -> list[str]:
    """Make sure the namespace has durafact's search attributes: register the missing
    ones when `register` allows and the server agrees, and return their names; else
    raise NamespaceNotReady with the command to run."""
    namespace = client.namespace
    missing = await missing_search_attributes(client)
    if not missing:
        return []
    if not register:
        raise NamespaceNotReady(missing_message(missing, namespace, f"{REGISTER_ENV}=0"))
    try:
        await client.operator_service.add_search_attributes(
            AddSearchAttributesRequest(
                namespace=namespace, search_attributes=dict.fromkeys(missing, KEYWORD)
            ),
            timeout=RPC_TIMEOUT,
        )
    except RPCError as exc:  # no permission (Temporal Cloud), too many attributes, ...
        reason = f"registering them was refused: {exc.status.name}: {' '.join(exc.message.split())}"
        raise NamespaceNotReady(missing_message(missing, namespace, reason)) from None
    loop = asyncio.get_running_loop()
    deadline = loop.time() + REGISTERED_TIMEOUT
    while still := await missing_search_attributes(client):
        if loop.time() > deadline:
            raise NamespaceNotReady(
                missing_message(still, namespace, "registered, but not listed yet: try again")
            )
        await asyncio.sleep(0.5)
    return missing


async def require_search_attributes(client: Client) -> None:
    """Raise NamespaceNotReady, with the command to run, unless the namespace has
    durafact's search attributes. For the worker, which never registers them."""
    missing = await missing_search_attributes(client)
    if missing:
        raise NamespaceNotReady(missing_message(missing, client.namespace))
