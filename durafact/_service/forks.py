"""Fork a finished run from an edited artifact: a new run of the same recipe and input that
keeps what the old run made upstream of the edit and reruns only what depends on it
(durafact/_core/forks.py says which, by the recipe's own stage rules). `durafact fork` and
`POST /api/runs/{id}/fork` present it; the console's "Fork from here" posts there.

Before anything starts, each a one-line refusal: the run exists (NotFound) and has ended
(NotRunning); its recipe forks (Refused; `Recipe.forks`); a worker answers for its
ledger (Unanswered); every edit names an artifact a fork of it may change, with a value
that fits (Invalid). The fork's input is the old run's, read from its history, with
`fork` set (`RecipeSettings.fork`): the kept stages' artifacts travel in it, once (a large
one goes to the payload store, as any large input), and its memo `durafact-forked-from`
names the old run.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from durafact._core.forks import (
    Fork,
    ForkError,
    ForkRules,
    check_editable,
    edit_value,
    plan_fork,
)
from durafact._core.ledger import Ledger
from durafact._recipes.recipe import RecipeSettings
from durafact._runtime.registry import Registered, Registry
from durafact._runtime.settings import Settings
from durafact._service.errors import Invalid, NotRunning, Refused, UnknownType
from durafact._service.inputs import check_sendable
from durafact._service.launch import Launch, Started, start_run, summarized
from durafact._service.ledger import read_ledger
from durafact._service.runs import describe, is_running, state_name

# The memo of a forked run: the run it was forked from.
FORKED_FROM_MEMO = "durafact-forked-from"


@dataclass
class Source:
    """A finished run a fork may start from: its description, recipe, ledger and rules."""

    description: Any
    recipe: Registered
    ledger: Ledger
    rules: ForkRules


@dataclass
class Forked:
    """The fork `fork_run` started, and what it keeps of the old run."""

    started: Started
    workflow_id: str
    fork: Fork


def forks(registry: Registry) -> list[str]:
    """The workflow types whose runs can be forked."""
    return [name for name in registry.names() if registry.workflows[name].forks]


async def source(client: Any, registry: Registry, workflow_id: str) -> Source:
    """The run `workflow_id`, if a fork may start from it; else why not, in one line."""
    description = await describe(client.get_workflow_handle(workflow_id))
    if is_running(description):
        raise NotRunning(f"workflow {workflow_id} is still running: fork it once it has ended")
    recipe = registry.get(description.workflow_type)
    if recipe is None:
        raise UnknownType(
            f"workflow {workflow_id} is a {description.workflow_type}, which is not registered "
            "here (--recipes MODULE or DURAFACT_RECIPES)"
        )
    if not recipe.forks:
        raise Refused(
            f"workflow {workflow_id}: a {recipe.name} run cannot be forked (the recipes that "
            f"fork: {', '.join(forks(registry)) or 'none'})"
        )
    _, ledger = await read_ledger(client, workflow_id, description.run_id)
    rules = recipe.fork_rules(ledger)
    if rules is None:
        raise Refused(f"workflow {workflow_id}: its ledger holds nothing a fork can start from")
    return Source(description, recipe, ledger, rules)


def fork_values(recipe: Registered | None, description: Any, ledger: Ledger) -> dict[str, str]:
    """What a person edits of each artifact a fork of the run may change (its text, else
    its JSON), by id; none while it runs, or when its recipe does not fork."""
    if recipe is None or not recipe.forks or is_running(description):
        return {}
    rules = recipe.fork_rules(ledger)
    if rules is None:
        return {}
    return {i: edit_value(ledger.get(i), e) for i, e in rules.editable.items() if i in ledger}


async def editable_data(
    client: Any, registry: Registry, workflow_id: str, artifact_id: str
) -> dict[str, Any]:
    """The data of an artifact a fork of the run may change (what `--edit` opens);
    Invalid when it cannot be changed."""
    run = await source(client, registry, workflow_id)
    try:
        check_editable(run.ledger, run.rules, workflow_id, artifact_id)
    except ForkError as exc:
        raise Invalid(str(exc)) from None
    data = run.ledger.get(artifact_id).data
    return data if isinstance(data, dict) else data.model_dump(mode="json")


async def fork_run(
    client: Any,
    settings: Settings,
    registry: Registry,
    workflow_id: str,
    edits: Mapping[str, Any],
    removed: Sequence[str] = (),
    *,
    new_id: str | None = None,
    started_by: str | None = None,
) -> Forked:
    """Start the fork of the finished run `workflow_id` with `edits` (artifact id -> new
    value: text, or a JSON object of fields) and `removed` artifacts, under `new_id` (a
    new id when None; an id in use is Refused)."""
    run = await source(client, registry, workflow_id)
    old = run.description
    try:
        fork = plan_fork(
            run.ledger,
            run.rules,
            workflow_id=workflow_id,
            run_id=old.run_id,
            edits=edits,
            removed=removed,
        )
    except ForkError as exc:
        raise Invalid(str(exc)) from None
    given = await run_input(client, old, run.recipe)
    if not isinstance(given, RecipeSettings):
        raise Refused(f"workflow {workflow_id}: its input is no RecipeSettings, so takes no fork")
    changed = [*fork.edited, *(f"{i} removed" for i in fork.removed)]
    launch = Launch(
        run.recipe,
        [given.model_copy(update={"fork": fork})],
        command="fork",
        id_prefix=f"{workflow_id}-fork",
        summary=summarized(f"fork of {workflow_id}: {', '.join(changed)}"),
        details=(
            f"**Forked from:** {workflow_id} (run {old.run_id}, {state_name(old)})\n\n"
            f"**Changed:** {', '.join(changed)}\n\n**Reruns from:** {fork.rerun_from}"
        ),
    )
    fork_id = launch.workflow_id(new_id)
    check_sendable(launch.args)
    started = await start_run(
        client,
        settings,
        launch,
        fork_id,
        attach=False,
        started_by=started_by,
        memo={FORKED_FROM_MEMO: {"workflow_id": workflow_id, "run_id": old.run_id}},
    )
    return Forked(started, fork_id, fork)


async def run_input(client: Any, description: Any, recipe: Registered) -> Any:
    """The input the run was started with, from the first event of its history, as its
    recipe's input type."""
    inputs = recipe.inputs or []
    if len(inputs) != 1:
        raise Refused(f"{recipe.name} takes {len(inputs)} inputs: a fork needs one")
    handle = client.get_workflow_handle(description.id, run_id=description.run_id)
    async for event in handle.fetch_history_events(page_size=1):
        payloads = event.workflow_execution_started_event_attributes.input.payloads
        (value,) = await client.data_converter.decode(payloads, inputs)
        return value
    raise Refused(f"workflow {description.id}: its history holds no start")
