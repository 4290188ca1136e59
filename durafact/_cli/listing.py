"""`list`: durafact's runs from Temporal's visibility store, one line each (one per chain
of runs continued as new), with their recipe, status, Temporal state, tokens and cost.

Every recipe run keeps the search attributes `DurafactRecipe`, `DurafactStatus`,
`DurafactTokens` and `DurafactCost` current (once per phase, and at its end:
durafact/_recipes/recipe.py), so filtering by them costs no worker and finds runs after any
restart. A running run's tokens and cost are shown as `status` shows them, from the
`usage` query. A run whose cost is not known (nothing was priced, or not every call
was) has no `DurafactCost`: it shows `-` and no `--over-cost` matches it. The HTTP API's
`GET /api/runs` lists the same way (durafact/_service/listing.py).
"""

from __future__ import annotations

import re
from decimal import Decimal, InvalidOperation
from typing import Any

from durafact._cli.output import Failed, cell, cost_text, say, say_json
from durafact._service import listing
from durafact._service.listing import RunInfo, runs_query

# Filters go into a visibility query: names only, never quotes.
NAME = re.compile(r"[A-Za-z0-9_.:-]{1,200}")
COLUMNS = ("WORKFLOW ID", "RECIPE", "STATUS", "STATE", "TOKENS", "COST", "STARTED (UTC)")
NUMBERS = {"TOKENS", "COST"}


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


async def list_runs(
    client: Any,
    recipe: str | None,
    status: str | None,
    over_cost: Decimal | None,
    limit: int,
    as_json: bool,
) -> int:
    """`list`: running runs first, then the most recently closed (visibility's order)."""
    query = runs_query(recipe=recipe, status=status, over_cost=over_cost)
    runs, more = await listing.list_runs(client, query, limit)
    shown = [row(run) for run in runs]
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


def row(run: RunInfo) -> dict[str, Any]:
    """One run as `--json` shows it: `tokens` None when nothing is recorded, `cost` None
    then and while it is unknown."""
    return {
        "workflow_id": run.workflow_id,
        "run_id": run.run_id,
        "workflow_type": run.workflow_type,
        "recipe": run.recipe,
        "status": run.status,
        "state": run.state,
        "tokens": run.tokens,
        "cost": run.cost,
        "started_at": run.started_at.isoformat(),
        "closed_at": run.closed_at.isoformat() if run.closed_at else None,
    }


def cells(run: dict[str, Any]) -> tuple[str, ...]:
    tokens = run["tokens"]
    if tokens is None:
        tokens_text = cost = "-"  # nothing recorded yet (or a run from before usage was)
    else:
        tokens_text = f"{tokens:,}"
        # No DurafactCost: nothing was priced, or not every call was (`status` says which).
        cost = "-" if run["cost"] is None else cost_text(run["cost"])
    return (
        cell(run["workflow_id"]),
        cell(run["recipe"] or "-"),
        cell(run["status"] or "-"),
        run["state"],
        tokens_text,
        cost,
        run["started_at"][:16].replace("T", " "),
    )
