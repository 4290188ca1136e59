"""Making sure a namespace can run durafact workflows.

Every durafact workflow upserts the search attributes `DurafactRecipe` and
`DurafactStatus` (Keyword), `DurafactTokens` (Int) and `DurafactCost` (Double). In a
namespace without them each of its workflow tasks fails,
again and again, while the caller waits; so the starter calls
`ensure_search_attributes` before it starts anything (registering them through the
operator service unless `DURAFACT_REGISTER_SEARCH_ATTRIBUTES=0`), and a worker with
`DurafactPlugin` calls `require_search_attributes` as it starts. Both refuse with the
exact `temporal operator search-attribute create ...` command to run.
"""

from __future__ import annotations

import asyncio
import os
import shlex
from collections.abc import Mapping, Sequence
from datetime import timedelta

from temporalio.api.enums.v1 import IndexedValueType
from temporalio.api.operatorservice.v1 import (
    AddSearchAttributesRequest,
    ListSearchAttributesRequest,
)
from temporalio.client import Client
from temporalio.service import RPCError, RPCStatusCode

from durafact._recipes.recipe import SEARCH_ATTRIBUTES
from durafact._runtime.settings import SettingsError

REGISTER_ENV = "DURAFACT_REGISTER_SEARCH_ATTRIBUTES"
RPC_TIMEOUT = timedelta(seconds=10)
# How long a registration may take to show in the namespace's list (a cluster's
# search-attribute cache can lag behind the call that changed it).
REGISTERED_TIMEOUT = 30.0
# Refusals of the operator service that mean "not for you" rather than "broken".
REFUSED = (
    RPCStatusCode.PERMISSION_DENIED,
    RPCStatusCode.UNIMPLEMENTED,
    RPCStatusCode.UNAUTHENTICATED,
)


class NamespaceNotReady(SettingsError):
    """The namespace cannot run durafact workflows (it lacks their search attributes,
    or does not exist); the message says what to run."""


NAMES = tuple(key.name for key in SEARCH_ATTRIBUTES)
# Each attribute's type, as the operator service names it.
TYPES = {
    key.name: IndexedValueType.ValueType(key.indexed_value_type.value) for key in SEARCH_ATTRIBUTES
}


def type_name(kind: IndexedValueType.ValueType) -> str:
    """A type as the `temporal` CLI names it: Keyword, Int, Double."""
    return IndexedValueType.Name(kind).removeprefix("INDEXED_VALUE_TYPE_").title()


def dev_server_flags() -> list[str]:
    """The attributes as `temporal server start-dev` registers them at start."""
    return [f for name in NAMES for f in ("--search-attribute", f"{name}={type_name(TYPES[name])}")]


def create_command(names: Sequence[str], namespace: str) -> str:
    """The `temporal` CLI command that creates `names`, each with its type.

    The CLI reads the same TEMPORAL_* variables and profile, so in the same
    environment it reaches the same server."""
    # One --type per --name: with a single --type, the CLI creates only the first name.
    flags = " ".join(f"--name {name} --type {type_name(TYPES[name])}" for name in names)
    return f"temporal operator search-attribute create --namespace {shlex.quote(namespace)} {flags}"


def missing_message(names: Sequence[str], namespace: str, why: str = "") -> str:
    """One line: what is missing, why it was not registered (if it was up to us), and
    the command that creates it."""
    plural = len(names) > 1
    return (
        f"namespace {namespace!r} lacks the search attribute{'s' if plural else ''} "
        f"{listed(names)} "
        f"that durafact workflows set{f' ({why})' if why else ''}; create "
        f"{'them' if plural else 'it'} with: {create_command(names, namespace)}"
    )


def listed(names: Sequence[str]) -> str:
    """`A`, `A and B`, `A, B and C`."""
    return " and ".join([", ".join(names[:-1]), names[-1]] if len(names) > 1 else names)


def registered_message(names: Sequence[str], namespace: str) -> str:
    return (
        f"registered the search attribute{'s' if len(names) > 1 else ''} "
        f"{listed(names)} in namespace {namespace!r}"
    )


def may_register(env: Mapping[str, str] | None = None) -> bool:
    """Whether the starter may register missing search attributes itself:
    yes unless DURAFACT_REGISTER_SEARCH_ATTRIBUTES is 0/false/no/off."""
    env = os.environ if env is None else env
    return (env.get(REGISTER_ENV) or "1").strip().lower() not in {"0", "false", "no", "off"}


async def missing_search_attributes(client: Client) -> list[str]:
    """durafact's search attributes that the client's namespace lacks.

    Raises NamespaceNotReady when one exists with another type than durafact's, or the
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
    wrong = {n: known[n] for n in NAMES if n in known and known[n] != TYPES[n]}
    if wrong:
        name, kind = next(iter(wrong.items()))
        raise NamespaceNotReady(
            f"search attribute {name} in namespace {namespace!r} is of type "
            f"{type_name(kind)}; durafact workflows set it as {type_name(TYPES[name])}"
        )
    return [name for name in NAMES if name not in known]


async def _queryable(client: Client, name: str) -> bool:
    try:
        value = "''" if TYPES[name] == IndexedValueType.INDEXED_VALUE_TYPE_KEYWORD else "0"
        await client.count_workflows(f"{name} = {value}", rpc_timeout=RPC_TIMEOUT)
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
                namespace=namespace, search_attributes={name: TYPES[name] for name in missing}
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
