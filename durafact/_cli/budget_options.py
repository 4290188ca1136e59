"""The budget options every command that starts a run takes (`start`, the recipe
commands, `chat`; declared in durafact/_cli/arguments.py): the fields of the run's
input's `budget` (a `RecipeSettings` field, durafact/_core/budget.py), which the service
layer sets and checks before anything starts (durafact/_service/launch.py).

    --budget-tokens N            tokens the run (and its children) may use
    --budget-cost X              what it may cost, in the worker's currency
    --budget-ask                 when spent, ask a person instead of ending over_budget
    --budget-ask-timeout DURATION   how long that question waits, then over_budget
"""

from __future__ import annotations

import argparse
from typing import Any

from durafact._cli.output import Failed


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
