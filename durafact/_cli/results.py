"""How a completed run's result reads on the command line: as its recipe declares
(`Recipe.show_result`, read through the registry), with the texts behind it read from
the run's ledger, then what it used; any other result as JSON."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

from durafact._cli.output import quoted, say, say_json, usage_line
from durafact._core.ledger import Ledger
from durafact._core.llm import Usage
from durafact._runtime.registry import Registered


def print_result(
    recipe: Registered | None, value: Any, workflow_id: str, ledger: Ledger | None
) -> None:
    """The result as `recipe` shows it; else as JSON.

    A result names the texts behind its answer (steps, quotes, the report, provenance)
    instead of carrying them: they are shown from the run's `ledger` (the `artifacts`
    query), or, when no worker answered it (None), left out with the command that
    shows them.
    """
    shown = recipe.shown(value, ledger) if recipe is not None else None
    if shown is None:
        say_json(value.model_dump(mode="json") if isinstance(value, BaseModel) else value, 2)
        return
    say(shown)
    usage = getattr(value, "usage", None)
    if isinstance(usage, Usage):
        say(usage_line(usage))
    command = f"durafact artifacts {quoted(workflow_id)}"
    if ledger is None:
        command = f"not shown (no worker answered the artifacts query); later: {command}"
    say(f"artifacts: {command}")
