"""Is a recipe registered, and are its tools there, where it will run? If not, the fix.

A worker that lacks a workflow type fails each of its workflow tasks ("Workflow class
TripPlanner is not registered on this worker"), again and again, while the run waits:
it never ends by itself. So after `start` (and every recipe command) starts a run on a
queue that a worker polls, it watches the run's first workflow task for a moment; when
the worker refuses the type, the run is terminated and the command says what to run.
`status` says the same of a run that is already failing that way.
"""

from __future__ import annotations

import asyncio
import contextlib
import shlex
import uuid
from datetime import timedelta
from typing import Any

from temporalio.api.enums.v1 import EventType
from temporalio.client import ActivityFailureError
from temporalio.common import RetryPolicy
from temporalio.exceptions import ApplicationError
from temporalio.service import RPCError

from durafact._activities.tools import UNKNOWN_TOOL
from durafact._core.tools import ToolListRequest
from durafact._runtime.connection import has_live_poller
from durafact._runtime.registry import (
    Registered,
    RegistrationError,
    load_registry,
    recipe_modules,
)
from durafact._service.errors import Invalid, NotRegistered
from durafact._service.troubles import events_newest_first

NOT_REGISTERED = "is not registered on this worker"
# How long to watch the first workflow task: a worker that has the type completes it
# in milliseconds; one that lacks it fails it as fast.
FIRST_TASK_WAIT = 10.0


def registration_fix(type_name: str, recipe: Registered | None = None) -> str:
    """The command that gets `type_name` onto a worker: the embedded worker restarted
    with its recipes module, or a worker of your own started with it. The module is
    `recipe`'s, else the one this command's own registration (`--recipes`,
    DURAFACT_RECIPES, entry points) lists `type_name` in."""
    if recipe is None:
        with contextlib.suppress(RegistrationError):
            recipe = load_registry(recipe_modules()).get(type_name)
    module = "MODULE"
    if recipe is not None:  # the recipes module that listed it, else where it is defined
        plain = " " not in recipe.origin and recipe.origin != "DurafactPlugin"
        module = recipe.origin if plain else recipe.cls.__module__
    from durafact._local.embedded import Embedded, is_our_process  # is it the embedded one?

    worker = Embedded.from_env().piece("worker").recorded()
    if worker is not None and is_our_process(*worker):
        return (
            f"the embedded worker does not have {type_name}: restart it with its recipes "
            f"module, `durafact down && durafact start {type_name} --input ... "
            f"--recipes {shlex.quote(module)}`"
        )
    return (
        f"no worker on this task queue has {type_name} registered: start one with "
        f"`durafact-worker --recipes {shlex.quote(module)}`"
    )


async def refuse_if_unregistered(
    client: Any, handle: Any, task_queue: str, recipe: Registered
) -> None:
    """Terminate the run just started and raise NotRegistered with the fix when the worker
    polling `task_queue` refuses its type; nothing when no worker polls (the command
    warns about that) or the check cannot tell."""
    try:
        if not await has_live_poller(client, client.namespace, task_queue):
            return
        refused = await first_task_refused(client, handle.id, handle.result_run_id)
    except RPCError:
        return  # a courtesy: never fail a run over it
    if refused:
        await handle.terminate(f"no worker on task queue {task_queue!r} has {recipe.name}")
        raise NotRegistered(registration_fix(recipe.name, recipe))


async def first_task_refused(client: Any, workflow_id: str, run_id: str) -> bool:
    """Whether the worker refused the run's type on its first workflow task; False when
    that task completed, or nothing was decided within FIRST_TASK_WAIT."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + FIRST_TASK_WAIT
    while loop.time() < deadline:
        async for event in events_newest_first(client, workflow_id, run_id):
            if event.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_COMPLETED:
                return False
            if event.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_FAILED:
                attributes = event.workflow_task_failed_event_attributes
                return NOT_REGISTERED in attributes.failure.message
        await asyncio.sleep(0.1)
    return False


# How long `react` waits for a worker to list its tools before it starts the run anyway
# (the run's own `list_tools` then says the same).
TOOLS_CHECK = timedelta(seconds=10)
# The option that gave the request's field a refusal names (the `list_tools` error's
# first detail; none: a tool).
OPTIONS = {"tools": "--tools", "mcp_servers": "--mcp"}


async def refuse_unknown_tools(client: Any, task_queue: str, request: ToolListRequest) -> None:
    """Raise Invalid, naming the worker's tools, when the worker polling
    `task_queue` lacks a tool or MCP server `request` names. The worker answers itself:
    the `list_tools` activity, run on its own (a standalone activity). A worker that does
    not answer in time, or a server without standalone activities, is no refusal."""
    try:
        if not await has_live_poller(client, client.namespace, task_queue):
            return  # nobody to ask: the command warns that nobody will run it either
        await client.execute_activity(
            "list_tools",
            request,
            id=f"check-tools-{uuid.uuid4().hex}",
            task_queue=task_queue,
            schedule_to_close_timeout=TOOLS_CHECK,
            retry_policy=RetryPolicy(maximum_attempts=1),
            summary="list tools: check a run's tools before it starts",
            rpc_timeout=TOOLS_CHECK,
        )
    except ActivityFailureError as exc:
        cause = exc.cause
        if isinstance(cause, ApplicationError) and cause.type == UNKNOWN_TOOL:
            field = cause.details[0] if cause.details else "tools"
            raise Invalid(f"{OPTIONS.get(field, '--tools')}: {cause.message}") from None
    except (RPCError, TimeoutError):
        pass
