"""Starting a registered recipe: `start TYPE` with a JSON input, a recipe's own command
(`Recipe.command`), and the HTTP API's `POST /api/runs`, all on one path.

A `Launch` is a registered workflow type with its input already checked against the
type hint of its `run` method, so bad input is `Invalid` before any connection.
`start_run` starts it; with `attach` (the command line) the same id while it runs
attaches to that run, after it completed shows its result, after a failure runs it
again; without (the API), an id in use is `Refused`.
"""

from __future__ import annotations

import dataclasses
import importlib
import json
import uuid
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from pydantic import BaseModel, ValidationError
from temporalio.common import (
    SearchAttributePair,
    TypedSearchAttributes,
    WorkflowIDConflictPolicy,
    WorkflowIDReusePolicy,
)
from temporalio.exceptions import WorkflowAlreadyStartedError

from durafact._core.budget import Budget
from durafact._core.commands import Command
from durafact._core.ids import OPAQUE_IDS_MEMO
from durafact._core.text import one_line, shorten
from durafact._core.tools import ToolListRequest
from durafact._recipes.react import ReActSettings
from durafact._recipes.recipe import MODEL_DEADLINE_MEMO, RECIPE_ATTRIBUTE, RecipeSettings
from durafact._runtime.codec import encrypts
from durafact._runtime.registry import Registered, Registry
from durafact._runtime.settings import Settings
from durafact._service.errors import Invalid, Refused, UnknownType
from durafact._service.inputs import (
    check_new_id,
    check_rules,
    checked,
    subject,
    type_label,
    validated,
)
from durafact._service.registration import refuse_if_unregistered
from durafact._service.runs import describe, state_name

DETAILS_LIMIT = 2000
SUMMARY_LIMIT = 100


@dataclass
class Launch:
    """A registered workflow and its checked input, ready to start."""

    recipe: Registered
    args: list[Any]
    command: str
    """The command that built it (`start TripPlanner`, `plan`), for the Web UI."""
    id_prefix: str
    summary: str
    details: str
    asks_approval: bool = False

    def workflow_id(self, given: str | None) -> str:
        """The id `given` (`--id`, the API's `id`), checked; a new one when None."""
        if given is None:
            return f"{self.id_prefix}-{uuid.uuid4().hex[:8]}"
        return check_new_id(given)


def registered_type(registry: Registry, type_name: str) -> Registered:
    recipe = registry.get(type_name)
    if recipe is None:
        raise UnknownType(
            f"unknown workflow type {type_name!r} (registered: {', '.join(registry.names())}; "
            "register yours with --recipes MODULE or DURAFACT_RECIPES)"
        )
    return recipe


def input_kind(recipe: Registered, given: bool, where: str = "--input") -> Any:
    """The type of the recipe's one input (None: it takes none); Invalid when the input
    is missing, or given to a recipe that takes none."""
    inputs = recipe.inputs or []
    if len(inputs) > 1:
        raise Invalid(f"{recipe.name} takes {len(inputs)} inputs; start gives it one")
    if inputs and not given:
        raise Invalid(f"{recipe.name} needs {where}: {type_label(inputs[0])} as JSON")
    if not inputs and given:
        raise Invalid(f"{recipe.name} takes no input: leave out {where}")
    return inputs[0] if inputs else None


def launch_of_input(recipe: Registered, kind: Any, data: Any, where: str = "--input") -> Launch:
    """The launch of `recipe` on `data` (parsed JSON) validated as `kind` (see `input_kind`)."""
    args = [validated(kind, data, where)] if kind is not None else []
    for value in args:
        check_rules(value, where)
    return Launch(
        recipe,
        args,
        command=f"start {recipe.name}",
        id_prefix=recipe.name,
        summary=f"{recipe.name}: {summarized(subject(args[0]))}" if args else recipe.name,
        details=input_details(data),
    )


def launch_of_command(recipe: Registered, values: dict[str, Any]) -> Launch:
    """The launch of the command `recipe` declares, on the values its argument and
    options were given (by field; None for an option not given): the command's
    `prepare` makes them the input's data, which is checked as its run method's input."""
    command = recipe.command
    assert command is not None, f"{recipe.name} declares no command"
    kind = input_kind(recipe, given=True, where=f"durafact {command.name}")
    value = checked(
        kind, prepared(command, values), positional=command.argument, options=command.flags()
    )
    check_rules(value)
    about = command.subject(value) if command.subject else getattr(value, command.argument, "")
    return Launch(
        recipe,
        [value],
        command=command.name,
        id_prefix=command.name,
        summary=f"{command.name}: {summarized(str(about))}",
        details=command.details(value) if command.details else input_details(value),
        asks_approval=command.asks_approval,
    )


def launch_of_text(recipe: Registered, text: str) -> Launch:
    """The launch of `recipe` on a person's text, as its command takes it (`durafact plan
    TEXT`): the text fills the command's argument, its options their defaults; Invalid
    for a recipe that declares no command."""
    command = recipe.command
    if command is None:
        raise Invalid(f"{recipe.name} declares no command, so no text fills its input")
    values = {option.name: option.default for option in command.options}
    return launch_of_command(recipe, {**values, command.argument: text})


def input_details(value: Any) -> str:
    """The Web UI's details of a run: the start of its input as JSON."""
    data = value.model_dump(mode="json") if isinstance(value, BaseModel) else value
    shown = json.dumps(data, ensure_ascii=False, indent=2, default=str)
    return f"**Input:**\n\n```json\n{shown[:DETAILS_LIMIT]}\n```"


def prepared(command: Command, values: dict[str, Any]) -> Any:
    """The input's data from a command's values: its `prepare`'s (a function, or one
    named by import path), else the values given."""
    prepare = command.prepare
    if isinstance(prepare, str):  # imported only now: it may do what workflow code may not
        module, _, name = prepare.partition(":")
        prepare = getattr(importlib.import_module(module), name)
    if prepare is None:
        return {field: value for field, value in values.items() if value is not None}
    try:
        return prepare(values)
    except ValueError as exc:
        raise Invalid(one_line(str(exc))) from None


def summarized(text: str) -> str:
    return shorten(text, SUMMARY_LIMIT, one_line=True)


def budgeted(value: Any, given: dict[str, Any], where: str = "the budget options") -> Any:
    """A run's input with the `given` budget fields set over its own budget's; Invalid
    for an input that takes no budget, or a budget that limits nothing."""
    if not given:
        return value
    if not isinstance(value, RecipeSettings):
        name = type(value).__name__ if isinstance(value, BaseModel) else "this input"
        raise Invalid(
            f"{where}: {name} takes no budget (an input takes one when its model "
            "subclasses RecipeSettings)"
        )
    own = value.budget.model_dump(exclude_defaults=True) if value.budget else {}
    merged = {**own, **given}
    if "tokens" not in merged and "cost" not in merged:
        raise Invalid("--budget-ask needs --budget-tokens or --budget-cost")
    try:
        budget = Budget.model_validate(merged)
    except ValidationError as exc:
        raise Invalid(f"{where}: {one_line(str(exc.errors()[0]['msg']))}") from None
    return value.model_copy(update={"budget": budget})


def with_budget(launch: Launch, given: dict[str, Any], where: str = "the budget options") -> Launch:
    """The launch with its input's budget set by `given` (see `budgeted`), and the
    budget in the Web UI's details."""
    if not given:
        return launch
    if not launch.args:
        raise Invalid(f"{where}: {launch.recipe.name} takes no input, so no budget")
    value = budgeted(launch.args[0], given, where)
    details = f"{launch.details}\n\n**Budget:** {value.budget.describe()}"
    return dataclasses.replace(launch, args=[value, *launch.args[1:]], details=details)


def with_endpoints(launch: Launch, given: dict[str, Any]) -> Launch:
    """The launch with its input's endpoint settings (`endpoints`, `fallback_after`) set
    by `given`; Invalid when its input has none (its model is no RecipeSettings)."""
    if not given:
        return launch
    value = launch.args[0] if launch.args else None
    if not isinstance(value, RecipeSettings):
        option = "--endpoint" if "endpoints" in given else "--fallback-after"
        raise Invalid(
            f"{option}: the input of {launch.recipe.name} has no model endpoints to set (its "
            "model does not subclass RecipeSettings)"
        )
    return dataclasses.replace(launch, args=[value.model_copy(update=given), *launch.args[1:]])


def tools_named(launch: Launch) -> ToolListRequest | None:
    """The worker tools and MCP servers the launch's input names, when it names any."""
    value = launch.args[0] if launch.args else None
    if not isinstance(value, ReActSettings):
        return None
    return ToolListRequest(tools=value.tools, mcp_servers=value.mcp_servers)


@dataclass
class Started:
    """A run `start_run` started, or the one already holding the id it attached to."""

    handle: Any
    run_id: str
    started: bool
    description: Any
    """Taken before the first workflow task was watched: while a short run still runs,
    so its progress is followed."""


async def start_run(
    client: Any,
    settings: Settings,
    launch: Launch,
    workflow_id: str,
    model_deadline: timedelta | None = None,
    *,
    attach: bool = True,
    started_by: str | None = None,
    memo: dict[str, Any] | None = None,
) -> Started:
    """Start the launch; `model_deadline` is how long its model calls may retry, instead
    of the recipe's default; `memo`, what the run's memo holds besides. With `attach`, a
    run holding the id is the one to follow; without, Refused. NotRegistered, with the
    fix, when the worker refuses its type (durafact/_service/registration.py)."""
    memo = dict(memo or {})
    if encrypts(client.data_converter):
        # Encrypted payloads: ids built from the goal's text must not leak it either.
        memo[OPAQUE_IDS_MEMO] = True
    if model_deadline is not None:
        memo[MODEL_DEADLINE_MEMO] = model_deadline.total_seconds()
    by = started_by or f"`durafact {launch.command}`"
    try:
        handle = await client.start_workflow(
            launch.recipe.run_fn,
            args=launch.args,
            id=workflow_id,
            task_queue=settings.task_queue,
            result_type=launch.recipe.result_type,
            # With `attach` the same id while it runs attaches to that run; after it
            # completed the id is taken (its result is shown); after a failure it runs again.
            id_conflict_policy=(
                WorkflowIDConflictPolicy.USE_EXISTING if attach else WorkflowIDConflictPolicy.FAIL
            ),
            id_reuse_policy=WorkflowIDReusePolicy.ALLOW_DUPLICATE_FAILED_ONLY,
            search_attributes=TypedSearchAttributes(
                [SearchAttributePair(RECIPE_ATTRIBUTE, launch.recipe.recipe_name)]
            ),
            static_summary=launch.summary,
            # The input itself travels once, in args; the details show only its start.
            static_details=f"{shorten(launch.details, DETAILS_LIMIT)}\n\nStarted by {by}.",
            memo=memo or None,
        )
        run_id = handle.result_run_id
        response = getattr(handle, "_start_workflow_response", None)
        started = bool(getattr(response, "started", True))
    except WorkflowAlreadyStartedError as exc:
        if not attach:
            taken = state_name(await describe(client.get_workflow_handle(workflow_id)))
            raise Refused(f"workflow id {workflow_id!r} is taken by a {taken} run") from None
        handle = client.get_workflow_handle(workflow_id, run_id=exc.run_id)
        run_id, started = exc.run_id, False
    description = await handle.describe()
    if started:
        await refuse_if_unregistered(client, handle, settings.task_queue, launch.recipe)
    return Started(handle, run_id, started, description)
