"""The endpoint options every command that starts a run takes (`start`, the recipe
commands, `chat`; declared in durafact/_cli/arguments.py): the run's input's `endpoints`
and `fallback_after` (`RecipeSettings` fields), which the service layer sets before
anything starts (durafact/_service/launch.py).

    --endpoint NAME              a model endpoint of the worker (repeatable, in order: a
                                 call that keeps failing on one moves to the next)
    --fallback-after DURATION    how long a call fails on one before it moves on (2m)
"""

from __future__ import annotations

import argparse
from typing import Any

from durafact._cli.output import Failed
from durafact._core.llm import checked_endpoints


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
