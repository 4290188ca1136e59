"""Reading one run: its description (`describe`, `running`), Temporal's state and the
recipe's status, what it used so far, what waits for a person, what it announced, how a
closed run ended and how its result reads as text (`result_text`, for every front door),
and a run's step agents.

A running recipe answers queries (`status`, `usage`, `progress`, `pending_questions`);
when no worker answers, the search attributes every recipe keeps current
(`DurafactStatus`, `DurafactTokens`, `DurafactCost`) say what they held at the run's last
phase, so a front door shows something, and says why it is not more.

The recipes' words a front door shows (`AWAITING_APPROVAL`, `OVER_BUDGET_ERROR`,
`Announcement`) are named here too: a front door imports no recipe.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from pydantic import BaseModel, TypeAdapter
from temporalio.client import WorkflowFailureError, WorkflowQueryFailedError
from temporalio.service import RPCError, RPCStatusCode

from durafact._core.approval import ApprovalQuestion
from durafact._core.ledger import Ledger
from durafact._core.llm import Usage
from durafact._recipes.approvals import AWAITING_APPROVAL as AWAITING_APPROVAL
from durafact._recipes.recipe import (
    COST_ATTRIBUTE,
    FALLBACK,
    STATUS_ATTRIBUTE,
    TOKENS_ATTRIBUTE,
    Progress,
)
from durafact._recipes.recipe import Announcement as Announcement
from durafact._recipes.spending import OVER_BUDGET_ERROR as OVER_BUDGET_ERROR
from durafact._runtime.codec import PayloadDecryptError
from durafact._runtime.registry import Registered, Registry
from durafact._service.errors import NotFound, NotRunning, failure_text

QUERY_TIMEOUT = timedelta(seconds=2)
# How often a follower asks a running run what it announced.
POLL_INTERVAL = 0.3


def result_type(registry: Registry, workflow_type: str) -> Any:
    """How to decode a run's result: its registered type's, else plain JSON."""
    recipe = registry.get(workflow_type)
    return recipe.result_type if recipe else None


def jsonable(value: Any) -> Any:
    """A decoded result as JSON data."""
    return value.model_dump(mode="json") if isinstance(value, BaseModel) else value


def result_text(recipe: Registered | None, result: Any, ledger: Ledger | None) -> str:
    """A completed run's result as a person reads it, the same text in every front door
    (`durafact result`, the console, the AI SDK's and AG-UI's streams): as its recipe
    shows it, with the texts of the run's `ledger` (None: not read), else its JSON."""
    shown = shown_result(recipe, result, ledger)
    if shown is not None:
        return shown
    return json.dumps(jsonable(result), ensure_ascii=False, indent=2, default=str)


def shown_result(recipe: Registered | None, result: Any, ledger: Ledger | None) -> str | None:
    """The result (decoded, or its JSON data) as its recipe shows it (`show_result`);
    None when the recipe declares no way, or the result does not read as its type."""
    if recipe is None or not recipe.shows_result:
        return None
    kind = recipe.result_type
    try:
        value = TypeAdapter(kind).validate_python(result) if kind is not None else result
        return recipe.shown(value, ledger)
    except Exception:  # another shape, or the recipe's own presenter failing: its JSON says it
        return None


def state_name(execution: Any) -> str:
    """Temporal's status of a described or listed run, by name (`RUNNING`, ...)."""
    return execution.status.name if execution.status else "UNKNOWN"


def is_running(execution: Any) -> bool:
    return state_name(execution) == "RUNNING"


async def describe(handle: Any) -> Any:
    """The run's description; NotFound when no run has the id."""
    # Temporal's own answer to an empty id is an InvalidArgument about a missing field.
    if not handle.id:
        raise NotFound("no workflow with an empty id")
    try:
        return await handle.describe()
    except RPCError as exc:
        if exc.status == RPCStatusCode.NOT_FOUND:
            raise NotFound(f"no workflow with id {handle.id!r}") from None
        raise


async def running(handle: Any, nothing: str = "nothing waits for an answer") -> Any:
    """The running workflow's description; NotRunning, ending with `nothing` (what there
    is not to do), when it has ended."""
    description = await describe(handle)
    state = state_name(description)
    if state != "RUNNING":
        raise NotRunning(f"workflow {handle.id} is {state}: {nothing}")
    return description


def unanswered(query: str, exc: Exception) -> str:
    """Why the `query` query brought no answer: the worker's answer does not decrypt with
    this process's keys, the query failed, or no worker answered (in time)."""
    if isinstance(exc, PayloadDecryptError):
        return f"a worker answered the {query} query, but its answer does not decrypt here: {exc}"
    if isinstance(exc, WorkflowQueryFailedError):  # e.g. a workflow type without that query
        return f"the {query} query failed: {exc.message}"
    return f"no worker answered the {query} query; is a worker running? durafact up"


@dataclass(frozen=True)
class RecipeStatus:
    """The recipe's own status: the `status` query's answer, else the DurafactStatus
    search attribute (None when neither), and why no worker answered (None: one did)."""

    value: str | None
    unanswered: str | None = None


async def recipe_status(handle: Any, description: Any) -> RecipeStatus:
    try:
        return RecipeStatus(
            await handle.query("status", result_type=str, rpc_timeout=QUERY_TIMEOUT)
        )
    except Exception as exc:
        return RecipeStatus(recorded_status(description), unanswered("status", exc))


def recorded_status(execution: Any) -> str | None:
    """The recipe's phase its DurafactStatus holds (None: not recorded)."""
    return execution.typed_search_attributes.get(STATUS_ATTRIBUTE)


async def queried_usage(handle: Any) -> Usage | None:
    """The `usage` query's answer; None when none came (no worker, or a worker from before
    the query)."""
    try:
        return await handle.query("usage", result_type=Usage, rpc_timeout=QUERY_TIMEOUT)
    except Exception:
        return None


def recorded_usage(execution: Any) -> tuple[int | None, float | None]:
    """The tokens and cost the run's search attributes hold, as of its last phase: None
    when not recorded (tokens), or while unknown (a model without a price: cost)."""
    attributes = execution.typed_search_attributes
    return attributes.get(TOKENS_ATTRIBUTE), attributes.get(COST_ATTRIBUTE)


async def pending_questions(handle: Any) -> list[ApprovalQuestion]:
    """What waits for a person (the query); raises what the query raised."""
    return await handle.query(
        "pending_questions", result_type=list[ApprovalQuestion], rpc_timeout=QUERY_TIMEOUT
    )


async def progress_page(handle: Any, offset: int) -> Progress | None:
    """The run's announcements from `offset` on (the `progress` query); None when it
    cannot answer yet (no workflow task done) or no worker did: ask again later."""
    try:
        return await handle.query(
            "progress", offset, result_type=Progress, rpc_timeout=QUERY_TIMEOUT
        )
    except Exception:
        return None


async def fallbacks(handle: Any) -> list[str]:
    """Which of the run's model calls another endpoint answered, from its announcements
    (none when no worker answered)."""
    page = await progress_page(handle, 0)
    return [event.message for event in page.events if event.kind == FALLBACK] if page else []


async def ending(client: Any, description: Any, result_type: Any) -> tuple[Any, str | None]:
    """A closed run's result (decoded as `result_type`), or the reason it did not complete."""
    handle = client.get_workflow_handle(
        description.id, run_id=description.run_id, result_type=result_type
    )
    try:
        return await handle.result(follow_runs=False), None
    except WorkflowFailureError as exc:
        return None, failure_text(exc)


async def step_agents(client: Any, registry: Registry, description: Any) -> list[Any]:
    """The step agents of a run whose recipe declares them, first step first: the runs
    whose id is this run's and a step's (`{id}/{step}`) started since this run did."""
    recipe = registry.get(description.workflow_type)
    if recipe is None or not recipe.step_agents:
        return []
    if '"' in description.id or "\\" in description.id:
        return []  # cannot go into a visibility query as it is; the agents' pages still open
    since = description.start_time.isoformat()
    query = f'WorkflowId STARTS_WITH "{description.id}/" AND StartTime >= "{since}"'
    agents = [execution async for execution in client.list_workflows(query)]
    return sorted(agents, key=lambda agent: agent.start_time)
