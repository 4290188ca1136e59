"""How a completed run's result reads on the command line: as every front door shows it
(`result_text`: as its recipe declares, `Recipe.show_result`, with the texts behind it
read from the run's ledger, else as JSON), then, for a recipe that shows its result,
what it used and where its artifacts are."""

from __future__ import annotations

from typing import Any

from durafact._cli.output import quoted, say, usage_line
from durafact._core.ledger import Ledger
from durafact._core.llm import Usage
from durafact._runtime.registry import Registered
from durafact._service.runs import result_text


def print_result(
    recipe: Registered | None, value: Any, workflow_id: str, ledger: Ledger | None
) -> None:
    """The result as `recipe` shows it; else as JSON.

    A result names the texts behind its answer (steps, quotes, the report, provenance)
    instead of carrying them: they are shown from the run's `ledger` (the `artifacts`
    query), or, when no worker answered it (None), left out with the command that
    shows them.
    """
    say(result_text(recipe, value, ledger))
    if recipe is None or not recipe.shows_result:
        return
    usage = getattr(value, "usage", None)
    if isinstance(usage, Usage):
        say(usage_line(usage))
    command = f"durafact artifacts {quoted(workflow_id)}"
    if ledger is None:
        command = f"not shown (no worker answered the artifacts query); later: {command}"
    say(f"artifacts: {command}")
