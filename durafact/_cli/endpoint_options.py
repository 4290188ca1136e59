"""The endpoint options every command that starts a run takes (`start`, the recipe
commands, `chat`; declared in durafact/_cli/arguments.py), and how they reach the run:
as its input's `endpoints` and `fallback_after` (`RecipeSettings` fields), checked
before anything starts.

    --endpoint NAME              a model endpoint of the worker (repeatable, in order: a
                                 call that keeps failing on one moves to the next)
    --fallback-after DURATION    how long a call fails on one before it moves on (2m)
"""

from __future__ import annotations

import argparse
import dataclasses
from typing import Any

from durafact._cli.launch import Launch
from durafact._cli.output import Failed
from durafact._core.llm import checked_endpoints
from durafact._recipes.recipe import RecipeSettings


def endpoints_given(args: argparse.Namespace) -> dict[str, Any]:
    """The `RecipeSettings` fields the options set (none given: empty); a name that is
    not an endpoint name, or one given twice, is one line (exit code 2)."""
    given: dict[str, Any] = {}
    if args.endpoint:
        try:
            given["endpoints"] = checked_endpoints(args.endpoint)
        except ValueError as exc:
            raise Failed(f"--endpoint: {exc}", code=2) from None
    if args.fallback_after is not None:
        given["fallback_after"] = args.fallback_after
    return given


def with_endpoints(launch: Launch, given: dict[str, Any]) -> Launch:
    """The launch with its input's endpoint settings set by `given`; one line when its
    input has none (its model does not subclass RecipeSettings)."""
    if not given:
        return launch
    value = launch.args[0] if launch.args else None
    if not isinstance(value, RecipeSettings):
        option = "--endpoint" if "endpoints" in given else "--fallback-after"
        raise Failed(
            f"{option}: the input of {launch.recipe.name} has no model endpoints to set (its "
            "model does not subclass RecipeSettings)",
            code=2,
        )
    return dataclasses.replace(launch, args=[value.model_copy(update=given), *launch.args[1:]])
