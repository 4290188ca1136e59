"""The budget options every command that starts a run takes (`start`, the recipe
commands, `chat`; declared in durafact/_cli/arguments.py), and how they reach the run:
as its input's `budget` (a `RecipeSettings` field, durafact/_core/budget.py), checked before
anything starts.

    --budget-tokens N            tokens the run (and its children) may use
    --budget-cost X              what it may cost, in the worker's currency
    --budget-ask                 when spent, ask a person instead of ending over_budget
    --budget-ask-timeout DURATION   how long that question waits, then over_budget
"""

from __future__ import annotations

import argparse
import dataclasses
from typing import Any

from pydantic import BaseModel, ValidationError

from durafact._cli.launch import Launch
from durafact._cli.output import Failed, one_line
from durafact._core.budget import Budget
from durafact._recipes.recipe import RecipeSettings


def budget_given(args: argparse.Namespace) -> dict[str, Any]:
    """The `Budget` fields the options set (none given: empty)."""
    given: dict[str, Any] = {}
    if args.budget_tokens is not None:
        given["tokens"] = args.budget_tokens
    if args.budget_cost is not None:
        given["cost"] = args.budget_cost
    if args.budget_ask:
        given["on_exhausted"] = "ask"
    if args.budget_ask_timeout is not None:
        if not args.budget_ask:
            raise Failed("--budget-ask-timeout goes with --budget-ask", code=2)
        given["ask_timeout"] = args.budget_ask_timeout
    return given


def budgeted(value: Any, given: dict[str, Any], where: str = "the budget options") -> Any:
    """A run's input with the `given` budget fields set over its own budget's, or a
    one-line reason (exit code 2): an input that takes no budget, a budget that
    limits nothing."""
    if not given:
        return value
    if not isinstance(value, RecipeSettings):
        name = type(value).__name__ if isinstance(value, BaseModel) else "this input"
        raise Failed(
            f"{where}: {name} takes no budget (an input takes one when its model "
            "subclasses RecipeSettings)",
            code=2,
        )
    own = value.budget.model_dump(exclude_defaults=True) if value.budget else {}
    merged = {**own, **given}
    if "tokens" not in merged and "cost" not in merged:
        raise Failed("--budget-ask needs --budget-tokens or --budget-cost", code=2)
    try:
        budget = Budget.model_validate(merged)
    except ValidationError as exc:
        raise Failed(f"{where}: {one_line(str(exc.errors()[0]['msg']))}", code=2) from None
    return value.model_copy(update={"budget": budget})


def with_budget(launch: Launch, given: dict[str, Any], where: str = "the budget options") -> Launch:
    """The launch with its input's budget set by `given` (see `budgeted`), and the
    budget in the Web UI's details."""
    if not given:
        return launch
    if not launch.args:
        raise Failed(f"{where}: {launch.recipe.name} takes no input, so no budget", code=2)
    value = budgeted(launch.args[0], given, where)
    details = f"{launch.details}\n\n**Budget:** {value.budget.describe()}"
    return dataclasses.replace(launch, args=[value, *launch.args[1:]], details=details)
