"""`list`: durafact's runs from Temporal's visibility store, one line each (one per chain
of runs continued as new), with their recipe, status, Temporal state, tokens and cost.

Every recipe run keeps the search attributes `DurafactRecipe`, `DurafactStatus`,
`DurafactTokens` and `DurafactCost` current (once per phase, and at its end:
durafact/_recipes/recipe.py), so filtering by them costs no worker and finds runs after any
restart. A running run's tokens and cost are shown as `status` shows them, from the
`usage` query (`spent`). A run whose cost is unknown (a model the worker has no price
for) has no `DurafactCost`: it shows `unknown` and no `--over-cost` matches it.
The HTTP API's `GET /api/runs` lists the same way.
"""

from __future__ import annotations

import asyncio
import re
from decimal import Decimal, InvalidOperation
from typing import Any

from durafact._cli.commands import queried_usage
from durafact._cli.output import Failed, cell, cost_text, say, say_json, state_name
from durafact._recipes.recipe import (
    COST_ATTRIBUTE,
    RECIPE_ATTRIBUTE,
    STATUS_ATTRIBUTE,
    TOKENS_ATTRIBUTE,
)

# Filters go into a visibility query: names only, never quotes.
NAME = re.compile(r"[A-Za-z0-9_.:-]{1,200}")
COLUMNS = ("WORKFLOW ID", "RECIPE", "STATUS", "STATE", "TOKENS", "COST", "STARTED (UTC)")
NUMBERS = {"TOKENS", "COST"}
# The last run of each chain: a chat's or a long loop's earlier runs, continued as new,
# are the same conversation or loop, and their usage is carried into the last.
LAST_OF_CHAIN = 'ExecutionStatus != "ContinuedAsNew"'


def name_filter(text: str | None, option: str) -> str | None:
    """`text` when it can go into a query as it is; else a one-line reason (exit code 2)."""
    if text is not None and not NAME.fullmatch(text):
        raise Failed(f"{option} {text!r}: letters, digits, '_', '.', ':' and '-' only", code=2)
    return text


def amount(text: str | None, option: str) -> Decimal | None:
    """A cost to compare with: a decimal number of at least 0."""
    if text is None:
        return None
    try:
        value = Decimal(text.strip())
    except InvalidOperation:
        value = Decimal("NaN")
    if not value.is_finite() or value < 0:
        raise Failed(f"{option} {text!r}: not a number of at least 0 (such as 0.25)", code=2)
    return value


def runs_query(recipe: str | None, status: str | None, over_cost: Decimal | None) -> str:
    """The visibility query of `list`: durafact's runs (those with a recipe), the last run
    of each chain (a chat's earlier runs continued as new), and the filters."""
    where = [f"{RECIPE_ATTRIBUTE.name} IS NOT NULL", LAST_OF_CHAIN]
    if recipe:
        where.append(f'({RECIPE_ATTRIBUTE.name} = "{recipe}" OR WorkflowType = "{recipe}")')
    if status:
        where.append(f'{STATUS_ATTRIBUTE.name} = "{status}"')
    if over_cost is not None:
        where.append(f"{COST_ATTRIBUTE.name} > {over_cost:f}")
    return " AND ".join(where)


async def list_runs(
    client: Any,
    recipe: str | None,
    status: str | None,
    over_cost: Decimal | None,
    limit: int,
    as_json: bool,
) -> int:
    """`list`: running runs first, then the most recently closed (visibility's order)."""
    query = runs_query(recipe, status, over_cost)
    found = [e async for e in client.list_workflows(query, limit=limit + 1)]
    usages = await asyncio.gather(*(spent(client, e) for e in found[:limit]))
    shown = [row(e, *usage) for e, usage in zip(found[:limit], usages, strict=True)]
    more = len(found) > limit
    if as_json:
        say_json({"runs": shown, "more": more})
        return 0
    if not shown:
        say("no runs" + (" match" if recipe or status or over_cost is not None else ""))
        return 0
    table = [COLUMNS, *(cells(r) for r in shown)]
    widths = [max(len(line[k]) for line in table) for k in range(len(COLUMNS))]
    for line in table:
        aligned = (
            cell.rjust(width) if column in NUMBERS else cell.ljust(width)
            for column, cell, width in zip(COLUMNS, line, widths, strict=True)
        )
        say("  ".join(aligned).rstrip())
    if more:
        say(f"the first {limit} runs; more with --limit")
    return 0


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
    attributes = execution.typed_search_attributes
    return attributes.get(TOKENS_ATTRIBUTE), attributes.get(COST_ATTRIBUTE)


def row(execution: Any, tokens: int | None, cost: float | None) -> dict[str, Any]:
    """One run as `--json` shows it, with what it `spent`: `tokens` None when nothing is
    recorded, `cost` None then and while it is unknown."""
    attributes = execution.typed_search_attributes
    return {
        "workflow_id": execution.id,
        "run_id": execution.run_id,
        "workflow_type": execution.workflow_type,
        "recipe": attributes.get(RECIPE_ATTRIBUTE),
        "status": attributes.get(STATUS_ATTRIBUTE),
        "state": state_name(execution),
        "tokens": tokens,
        "cost": cost,
        "started_at": execution.start_time.isoformat(),
        "closed_at": execution.close_time.isoformat() if execution.close_time else None,
    }


def cells(run: dict[str, Any]) -> tuple[str, ...]:
    tokens = run["tokens"]
    if tokens is None:
        tokens_text = cost = "-"  # nothing recorded yet (or a run from before usage was)
    else:
        tokens_text = f"{tokens:,}"
        cost = "unknown" if run["cost"] is None else cost_text(run["cost"])
    return (
        cell(run["workflow_id"]),
        cell(run["recipe"] or "-"),
        cell(run["status"] or "-"),
        run["state"],
        tokens_text,
        cost,
        run["started_at"][:16].replace("T", " "),
    )
