"""Listing runs from Temporal's visibility store: one row per chain of runs continued as
new, with its recipe, status, Temporal state, tokens and cost.

Every recipe run keeps the search attributes `DurafactRecipe`, `DurafactStatus`,
`DurafactTokens` and `DurafactCost` current (once per phase, and at its end), so
filtering by them costs no worker and finds runs after any restart. A running run's
tokens and cost are those `status` shows, from the `usage` query (`spent`). A run whose
cost is unknown (a model the worker has no price for) has no `DurafactCost`: its cost is
None, and no `over_cost` filter matches it.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal
from typing import Any

from durafact._recipes.recipe import COST_ATTRIBUTE, RECIPE_ATTRIBUTE, STATUS_ATTRIBUTE
from durafact._service.runs import queried_usage, recorded_usage, state_name

# The last run of each chain: a chat's or a long loop's earlier runs, continued as new,
# are the same conversation or loop, and their usage is carried into the last.
LAST_OF_CHAIN = 'ExecutionStatus != "ContinuedAsNew"'


@dataclass(frozen=True)
class RunInfo:
    """One run as a list shows it."""

    workflow_id: str
    run_id: str
    workflow_type: str
    recipe: str | None
    status: str | None
    state: str
    tokens: int | None
    """None when nothing is recorded."""
    cost: float | None
    """None then, and while it is unknown."""
    started_at: datetime
    closed_at: datetime | None


def runs_query(
    *,
    recipe: str | None = None,
    workflow_type: str | None = None,
    status: str | None = None,
    over_cost: Decimal | None = None,
    state: str | None = None,
) -> str:
    """A visibility query of durafact's runs (those with a recipe) on every task queue of
    the namespace (the filters are names, checked by the caller): `recipe`, a recipe or
    a workflow type; `state`, Temporal's (visibility's name: `Running`), else the last
    run of each chain."""
    where = [f"{RECIPE_ATTRIBUTE.name} IS NOT NULL"]
    if recipe:
        where.append(f'({RECIPE_ATTRIBUTE.name} = "{recipe}" OR WorkflowType = "{recipe}")')
    if workflow_type:
        where.append(f'WorkflowType="{workflow_type}"')
    if status:
        where.append(f'{STATUS_ATTRIBUTE.name} = "{status}"')
    if over_cost is not None:
        where.append(f"{COST_ATTRIBUTE.name} > {over_cost:f}")
    where.append(f'ExecutionStatus="{state}"' if state else LAST_OF_CHAIN)
    return " AND ".join(where)


async def spent(client: Any, execution: Any) -> tuple[int | None, float | None]:
    """A run's tokens and cost as `status` shows them: while it runs, the `usage` query's
    answer (a chat's search attributes hold what it had spent as its run began: its phase,
    `chatting`, never changes after); else, and when no worker answers, DurafactTokens and
    DurafactCost."""
    if state_name(execution) == "RUNNING":
        handle = client.get_workflow_handle(execution.id, run_id=execution.run_id)
        usage = await queried_usage(handle)
        if usage is not None:
            return usage.total_tokens, None if usage.cost is None else float(usage.cost)
    return recorded_usage(execution)


def run_info(execution: Any, tokens: int | None, cost: float | None) -> RunInfo:
    attributes = execution.typed_search_attributes
    return RunInfo(
        workflow_id=execution.id,
        run_id=execution.run_id,
        workflow_type=execution.workflow_type,
        recipe=attributes.get(RECIPE_ATTRIBUTE),
        status=attributes.get(STATUS_ATTRIBUTE),
        state=state_name(execution),
        tokens=tokens,
        cost=cost,
        started_at=execution.start_time,
        closed_at=execution.close_time,
    )


def recorded(execution: Any) -> RunInfo:
    """The run with the usage its search attributes hold, as of its last phase."""
    return run_info(execution, *recorded_usage(execution))


async def with_usage(client: Any, executions: list[Any]) -> list[RunInfo]:
    """The runs with what each `spent`."""
    usages = await asyncio.gather(*(spent(client, e) for e in executions))
    return [run_info(e, *usage) for e, usage in zip(executions, usages, strict=True)]


async def list_runs(client: Any, query: str, limit: int) -> tuple[list[RunInfo], bool]:
    """Running runs first, then the most recently closed (visibility's order): at most
    `limit`, and whether there are more."""
    found = [e async for e in client.list_workflows(query, limit=limit + 1)]
    return await with_usage(client, found[:limit]), len(found) > limit


async def page_of_runs(
    client: Any, query: str, page_size: int, token: bytes | None
) -> tuple[list[RunInfo], bytes | None]:
    """One page of the runs, and the token of the next (None: the last page)."""
    listing = client.list_workflows(query, page_size=page_size, next_page_token=token)
    await listing.fetch_next_page()
    return await with_usage(client, listing.current_page or []), listing.next_page_token
