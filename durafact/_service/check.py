"""`check`: would the code of this process break the runs of the namespace? Each run's
history is replayed against it, as a worker with this code would replay it on its next
workflow task (durafact/_runtime/replay.py: the registered recipes, the data converter
with the environment's keys, the sandbox).

The runs are the namespace's durafact runs (a `DurafactRecipe`, or a registered workflow
type): every running one first, since a deploy moves them onto the new code, then the
most recently closed, which a query (`artifacts`, `result` of a chat) replays too
(`runs_filter`: all, or one recipe's; `runs_to_check`: the closed ones since a moment,
and how many in all). A history
exported to a file (`temporal workflow show --output json`, tests/histories) is checked
the same way, with no server.

Each run gets a `Verdict`: it matches, it diverges (the first event that does not match,
and the likely cause: durafact/_service/divergence.py), the code raises while replaying
it, or its workflow type is not registered here.
"""

from __future__ import annotations

import asyncio
import json
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from temporalio.client import WorkflowHistory
from temporalio.workflow import NondeterminismError

from durafact._recipes.recipe import RECIPE_ATTRIBUTE
from durafact._runtime.codec import converter_for
from durafact._runtime.plugin import DurafactPlugin
from durafact._runtime.registry import RegistrationError, Registry
from durafact._runtime.replay import replays
from durafact._service.divergence import Divergence, divergence, raised
from durafact._service.errors import Invalid
from durafact._service.runs import state_name

MATCH = "match"
DIVERGES = "diverges"
FAILS = "fails"
NOT_REGISTERED = "not_registered"
# How many histories are fetched ahead of the one that replays.
FETCHING = 8


@dataclass(frozen=True)
class Source:
    """One history to check: the run it records, and the file it was read from (None
    for a run of the server)."""

    workflow_id: str
    run_id: str
    workflow_type: str
    state: str | None
    """Temporal's state of a run of the server (`RUNNING`, ...); None for a file."""
    file: str | None = None


@dataclass(frozen=True)
class Verdict:
    source: Source
    outcome: str
    """MATCH, DIVERGES, FAILS or NOT_REGISTERED."""
    divergence: Divergence | None = None
    """Where and why, unless it matches."""


@dataclass(frozen=True)
class Report:
    verdicts: list[Verdict]
    more: bool = False
    """More runs were found than the limit let through."""

    @property
    def ok(self) -> bool:
        return all(verdict.outcome == MATCH for verdict in self.verdicts)

    def count(self, outcome: str) -> int:
        return sum(verdict.outcome == outcome for verdict in self.verdicts)


def replaying_plugin(modules: Sequence[str]) -> DurafactPlugin:
    """The plugin a worker of this code would have: the built-ins, the entry points,
    `modules`, and the keys and payload store of the environment; a registration mistake
    is Invalid, before anything runs."""
    # Here, not at the top: the MCP SDK is a worker's (and a replayer's), not every command's.
    from durafact._activities.mcp import McpConfigError

    plugin = DurafactPlugin(recipes=list(modules))
    try:
        plugin.registry  # noqa: B018 - a registration mistake is one line, before anything runs
    except (RegistrationError, McpConfigError) as exc:
        raise Invalid(str(exc)) from None
    if not plugin.keys:  # an encrypted run then fails naming the key it needs
        plugin.data_converter_value = converter_for(None, plugin.payloads, explain=True)
    return plugin


# --- which runs -------------------------------------------------------------------------


def runs_filter(registry: Registry, recipe: str | None) -> str:
    """The visibility query of the runs to check, without their state: durafact's runs
    (and any of a registered workflow type, a run that has not said its recipe yet), or
    those of `recipe`, a registered recipe's name or workflow type (else Invalid)."""
    if recipe is None:
        types = registry.names()
    else:
        types = [r.name for r in registry.workflows.values() if recipe in (r.name, r.recipe_name)]
        if not types:
            known = sorted({r.recipe_name for r in registry.workflows.values()})
            raise Invalid(
                f"--recipe {recipe}: no registered recipe has that name or workflow type "
                f"(registered: {', '.join(known)}; more with --recipes MODULE)"
            )
    names = ", ".join(f'"{name}"' for name in types)
    recipes = (
        f'{RECIPE_ATTRIBUTE.name} = "{recipe}"'
        if recipe
        else f"{RECIPE_ATTRIBUTE.name} IS NOT NULL"
    )
    return f"({recipes} OR WorkflowType IN ({names}))"


async def runs_to_check(
    client: Any, query: str, since: datetime | None, limit: int
) -> tuple[list[Any], bool]:
    """The running runs the query finds, then the closed ones (since `since`), at most
    `limit` in all, and whether there were more."""
    running = [
        e
        async for e in client.list_workflows(
            f'{query} AND ExecutionStatus = "Running"', limit=limit + 1
        )
    ]
    closed: list[Any] = []
    if len(running) <= limit:
        ended = f'{query} AND ExecutionStatus != "Running"'
        if since is not None:
            ended += f' AND CloseTime >= "{since.isoformat()}"'
        left = limit - len(running)
        closed = [e async for e in client.list_workflows(ended, limit=left + 1)]
    found = running + closed
    return found[:limit], len(found) > limit


async def check_runs(
    client: Any, plugin: DurafactPlugin, query: str, since: datetime | None, limit: int
) -> Report:
    """The runs `query` finds (`runs_filter`, `runs_to_check`) replayed against this code."""
    executions, more = await runs_to_check(client, query, since, limit)
    sources = [Source(e.id, e.run_id, e.workflow_type, state_name(e)) for e in executions]

    async def fetch(source: Source) -> WorkflowHistory:
        handle = client.get_workflow_handle(source.workflow_id, run_id=source.run_id)
        return await handle.fetch_history()

    verdicts = await replay_all(plugin, sources, fetch)
    return Report(verdicts, more)


# --- exported histories -----------------------------------------------------------------


def read_history(path: Path) -> tuple[Source, WorkflowHistory]:
    """A history exported as JSON (`temporal workflow show --output json`, or
    `WorkflowHistory.to_json`), or Invalid naming the file and what is wrong."""
    try:
        text = path.read_text()
    except OSError as exc:
        raise Invalid(f"--history {path}: {exc.strerror or exc}") from None
    except UnicodeDecodeError:
        raise Invalid(f"--history {path}: not a text file") from None
    try:
        started = json.loads(text)["events"][0]["workflowExecutionStartedEventAttributes"]
        workflow_id = started.get("workflowId") or path.stem
        history = WorkflowHistory.from_json(workflow_id, text)
    except (ValueError, KeyError, IndexError, TypeError) as exc:
        raise Invalid(
            f"--history {path}: not a workflow history in JSON, as `temporal workflow show "
            f"--output json` writes it ({type(exc).__name__})"
        ) from None
    source = Source(
        workflow_id=workflow_id,
        run_id=history.run_id,
        workflow_type=started["workflowType"]["name"],
        state=None,
        file=str(path),
    )
    return source, history


async def check_files(plugin: DurafactPlugin, paths: Sequence[Path]) -> Report:
    """Exported histories replayed against this code; every file is read first, so a
    bad one is Invalid before anything replays."""
    read = dict(read_history(path) for path in paths)

    async def history_of(source: Source) -> WorkflowHistory:
        return read[source]

    return Report(await replay_all(plugin, list(read), history_of))


# --- replaying --------------------------------------------------------------------------


async def replay_all(
    plugin: DurafactPlugin,
    sources: list[Source],
    history_of: Callable[[Source], Awaitable[WorkflowHistory]],
) -> list[Verdict]:
    """Each source's history replayed, in order, unless its workflow type is not
    registered here; the next FETCHING histories are fetched while one replays."""
    registered = plugin.registry.workflows
    verdicts = {
        k: Verdict(source, NOT_REGISTERED, not_registered(source))
        for k, source in enumerate(sources)
        if source.workflow_type not in registered
    }
    replayed = [k for k in range(len(sources)) if k not in verdicts]
    ahead: deque[asyncio.Task[WorkflowHistory]] = deque()

    async def in_order() -> AsyncIterator[WorkflowHistory]:
        for k in replayed:
            ahead.append(asyncio.create_task(history_of(sources[k])))
            if len(ahead) > FETCHING:
                yield await ahead.popleft()
        while ahead:
            yield await ahead.popleft()

    try:
        if replayed:
            async with replays(plugin, in_order()) as results:
                at = iter(replayed)
                async for result in results:
                    k = next(at)
                    verdicts[k] = verdict(sources[k], result.history, result.replay_failure)
    finally:
        for fetch in ahead:
            fetch.cancel()
    return [verdicts[k] for k in range(len(sources))]


def verdict(source: Source, history: WorkflowHistory, failure: Exception | None) -> Verdict:
    if failure is None:
        return Verdict(source, MATCH)
    if isinstance(failure, NondeterminismError):
        return Verdict(source, DIVERGES, divergence(failure, history))
    return Verdict(source, FAILS, raised(failure))


def not_registered(source: Source) -> Divergence:
    return Divergence(
        event_id=None,
        event_type=None,
        recorded=None,
        now=None,
        cause="its workflow type is not registered here, so a worker with this code fails "
        "the run's workflow tasks: register its recipes module (--recipes MODULE, "
        "DURAFACT_RECIPES or an entry point)",
        error=f"workflow type {source.workflow_type} is not registered",
    )
