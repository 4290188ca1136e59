"""Starting a registered workflow: `start TYPE --input JSON|@FILE`, and the per-recipe
commands built on the same path.

A `Launch` is a workflow type from the registry with its input already checked
against the type hint of the workflow's `run` method, so bad input is one line
(exit code 2) before any connection. `start` starts it with id conflict policy
USE_EXISTING: the same `--id` while it runs attaches to that run, after it
completed shows its result, after a failure runs it again.
"""

from __future__ import annotations

import json
import sys
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

from pydantic import BaseModel, TypeAdapter, ValidationError
from temporalio.common import (
    SearchAttributePair,
    TypedSearchAttributes,
    WorkflowIDConflictPolicy,
    WorkflowIDReusePolicy,
)
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.exceptions import WorkflowAlreadyStartedError

from durafact._cli.follow import wait_and_print, warn_if_no_worker
from durafact._cli.output import (
    ANSWER_HINT,
    Failed,
    NotFound,
    emit_json,
    note,
    one_line,
    quoted,
    say,
    state_name,
    summarize,
)
from durafact._cli.registered import refuse_if_unregistered
from durafact._core.answer_flow import AnswerBatchError
from durafact._core.ids import OPAQUE_IDS_MEMO
from durafact._core.text import shorten
from durafact._recipes.answer_flow import AnswerBatchInput, check_answer_batch
from durafact._recipes.recipe import MODEL_DEADLINE_MEMO, RECIPE_ATTRIBUTE
from durafact._runtime.codec import encrypts
from durafact._runtime.registry import Registered, Registry
from durafact._runtime.settings import Settings

DETAILS_LIMIT = 2000
# Inputs over the payload threshold are stored outside Temporal (durafact/_runtime/payloads.py), so
# Temporal's 2 MB limit no longer caps them. This one does: 10 MB of text is more than
# any model's context window holds (1M tokens is about 4 MB), and every model call that
# carries the input stores another copy of it.
MAX_INPUT_BYTES = 10_000_000
MAX_INPUT_DEPTH = 100  # JSON nesting of --input; deeper is refused before it is parsed on
# Inputs whose rules go beyond their types, each with the check its recipe's workflow makes
# as it starts, made here first: every door (`start`, the HTTP API; `answer FILE` as it
# reads the file) refuses what would fail the run.
INPUT_RULES: dict[type, Callable[[Any], object]] = {AnswerBatchInput: check_answer_batch}


@dataclass
class Launch:
    """A registered workflow and its checked input, ready to start."""

    recipe: Registered
    args: list[Any]
    command: str
    """The starter command that built it (`start TripPlanner`, `plan`), for the Web UI."""
    id_prefix: str
    summary: str
    details: str
    asks_approval: bool = False

    @property
    def recipe_name(self) -> str:
        """What the `DurafactRecipe` search attribute holds: the recipe's own name."""
        return getattr(self.recipe.cls, "recipe_name", None) or self.recipe.name

    def workflow_id(self, given: str | None) -> str:
        """The id `given` (`--id`, the API's `id`), checked; a new one when None."""
        if given is None:
            return f"{self.id_prefix}-{uuid.uuid4().hex[:8]}"
        return check_new_id(given)


def check_new_id(workflow_id: str) -> str:
    """`workflow_id`, when a person may give it to a new run or chat; else a one-line
    reason (exit code 2, the API's 400). An id cannot hold '/': that is how the agents
    of a run's steps are named (`{run}/{step}`), and one started by hand could take an
    agent's id."""
    if not workflow_id.strip():
        raise Failed("the workflow id is empty", code=2)
    if "/" in workflow_id:
        raise Failed("the id holds '/', which names the agents of a run's steps", code=2)
    check_path_id(workflow_id)
    return workflow_id


def check_path_id(workflow_id: str) -> None:
    """A one-line reason (exit code 2, the API's 400) when a step of the id, between
    its '/'s, is `.` or `..`: a URL resolves those away (the console's link to run `..`
    opens `/`, and `/api/runs/.` is the list of runs), so no route could name the run."""
    if any(step in (".", "..") for step in workflow_id.split("/")):
        raise Failed(
            f"the id {workflow_id!r} has '.' or '..' as a path step, which a URL cannot name",
            code=2,
        )


def launch_of_type(registry: Registry, type_name: str, given: str | None) -> Launch:
    """`start TYPE --input ...`: the registered type, its input read and validated."""
    recipe = registered_type(registry, type_name)
    kind = input_kind(recipe, given is not None)
    return launch_of_input(recipe, kind, read_input(given) if given is not None else None)


def registered_type(registry: Registry, type_name: str) -> Registered:
    recipe = registry.get(type_name)
    if recipe is None:
        raise NotFound(
            f"unknown workflow type {type_name!r} (registered: {', '.join(registry.names())}; "
            "register yours with --recipes MODULE or DURAFACT_RECIPES)",
            code=2,
        )
    return recipe


def input_kind(recipe: Registered, given: bool, where: str = "--input") -> Any:
    """The type of the recipe's one input (None: it takes none), or one line saying that
    the input is missing, or given to a recipe that takes none."""
    inputs = recipe.inputs or []
    if len(inputs) > 1:
        raise Failed(f"{recipe.name} takes {len(inputs)} inputs; start gives it one", code=2)
    if inputs and not given:
        raise Failed(f"{recipe.name} needs {where}: {type_label(inputs[0])} as JSON", code=2)
    if not inputs and given:
        raise Failed(f"{recipe.name} takes no input: leave out {where}", code=2)
    return inputs[0] if inputs else None


def launch_of_input(recipe: Registered, kind: Any, data: Any, where: str = "--input") -> Launch:
    """The launch of `recipe` on `data` (parsed JSON) validated as `kind` (see `input_kind`)."""
    args = [validated(kind, data, where)] if kind is not None else []
    for value in args:
        check_rules(value, where)
    shown = json.dumps(data, ensure_ascii=False, indent=2)
    return Launch(
        recipe,
        args,
        command=f"start {recipe.name}",
        id_prefix=recipe.name,
        summary=f"{recipe.name}: {summarize(subject(args[0]))}" if args else recipe.name,
        details=f"**Input:**\n\n```json\n{shown[:DETAILS_LIMIT]}\n```",
    )


def read_input(given: str) -> Any:
    """`--input`: JSON text, or `@FILE` (`@-` reads standard input), parsed."""
    where = "--input"
    text = given
    if given.startswith("@"):
        name = given[1:]
        where = f"--input {given}"
        try:
            # One byte past the cap is enough to know the input is too large.
            if name == "-":
                raw = sys.stdin.buffer.read(MAX_INPUT_BYTES + 1)
            else:
                with Path(name).open("rb") as handle:
                    raw = handle.read(MAX_INPUT_BYTES + 1)
            if len(raw) > MAX_INPUT_BYTES:
                raise Failed(
                    f"--input: {name} is over {MAX_INPUT_BYTES:,} bytes, more than a workflow "
                    "input may hold; put large content in a source and pass its location",
                    code=2,
                )
            text = raw.decode("utf-8")
        except OSError as exc:
            raise Failed(f"--input: cannot read {name}: {exc.strerror}", code=2) from None
        except UnicodeDecodeError as exc:
            raise Failed(f"--input: cannot read {name}: {exc.reason}", code=2) from None
    too_deep = Failed(f"{where} is nested more than {MAX_INPUT_DEPTH} levels deep", code=2)
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise Failed(
            f"{where} is not JSON: {exc.msg} (line {exc.lineno}, column {exc.colno})", code=2
        ) from None
    except RecursionError:
        raise too_deep from None
    except ValueError:  # the only other one json raises: an integer past 4300 digits
        too_long = f"{where} holds a number too long to read (over 4300 digits)"
        raise Failed(too_long, code=2) from None
    if depth(data) > MAX_INPUT_DEPTH:
        raise too_deep
    return data


def depth(value: Any) -> int:
    """How deeply lists and objects nest in `value` (a scalar: 0), without recursion."""
    deepest = 0
    stack = [(value, 1)]
    while stack:
        item, level = stack.pop()
        if isinstance(item, dict | list):
            deepest = max(deepest, level)
            children = item.values() if isinstance(item, dict) else item
            stack.extend((child, level + 1) for child in children)
    return deepest


def check_sendable(launch: Launch) -> None:
    """Refuse, before connecting, input the data converter cannot encode (text that is
    not valid Unicode, such as a lone surrogate written as a JSON escape) and input
    over MAX_INPUT_BYTES, whichever command built it."""
    try:
        payloads = pydantic_data_converter.payload_converter.to_payloads(launch.args)
    except Exception as exc:
        reason = one_line(str(exc))
        if "surrogates not allowed" in reason:
            reason = "it holds text that is not valid Unicode (a lone surrogate such as \\ud800)"
        raise Failed(f"the input cannot be sent to Temporal: {reason}", code=2) from None
    size = sum(len(payload.data) for payload in payloads)
    if size > MAX_INPUT_BYTES:
        raise Failed(
            f"the input is {size:,} bytes, over the {MAX_INPUT_BYTES:,} a workflow input may "
            "hold; put large content in a source (such as --docs DIR) and pass its location",
            code=2,
        )


class InvalidInput(Failed):
    """Input that does not fit the recipe's input model (exit code 2); `errors` are
    pydantic's, which the HTTP API returns with its 422."""

    def __init__(self, message: str, errors: list[dict[str, Any]]) -> None:
        super().__init__(message, code=2)
        self.errors = errors


def validated(kind: Any, data: Any, where: str = "--input") -> Any:
    """`data` as an instance of `kind` (the run method's type hint), or one line saying
    which field is wrong and why (`where` names the input: the option, or the API's field)."""
    try:
        adapter = TypeAdapter(kind)
    except Exception:
        return data  # a type pydantic cannot check: the data converter decides
    try:
        return adapter.validate_python(data)
    except ValidationError as exc:
        errors = exc.errors()
        error = errors[0]
        path = ".".join(str(part) for part in error["loc"])
        reason = str(error.get("ctx", {}).get("error") or error["msg"])
        more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
        field = f"{path}: " if path else ""
        raise InvalidInput(
            f"{where} does not fit {type_label(kind)}: {field}{one_line(reason)}{more}",
            exc.errors(include_url=False, include_context=False, include_input=False),
        ) from None


def check_rules(value: Any, where: str = "--input") -> None:
    """InvalidInput unless `value` keeps the rules `INPUT_RULES` has for its type."""
    for kind, check in INPUT_RULES.items():
        if isinstance(value, kind):
            try:
                check(value)
            except AnswerBatchError as exc:
                errors = [{"type": "value_error", "loc": [], "msg": str(exc)}]
                message = f"{where} does not fit {type_label(kind)}: {one_line(str(exc))}"
                raise InvalidInput(message, errors) from None


def type_label(kind: Any) -> str:
    return getattr(kind, "__name__", None) or str(kind)


def subject(value: Any) -> str:
    """What names a run in the Web UI's summary: a model's first text field, else JSON."""
    if isinstance(value, BaseModel):
        for name in type(value).model_fields:
            field = getattr(value, name)
            if isinstance(field, str) and field.strip():
                return field
        return value.model_dump_json()
    return value if isinstance(value, str) else json.dumps(value, default=str)


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
) -> Started:
    """Start the launch; `model_deadline` is how long its model calls may retry, instead
    of the recipe's default. With `attach`, a run holding the id is the one to follow;
    without, it is WorkflowAlreadyStartedError. Raises Failed with the fix when the
    worker refuses the type (durafact/_cli/registered.py)."""
    memo: dict[str, Any] = {}
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
                [SearchAttributePair(RECIPE_ATTRIBUTE, launch.recipe_name)]
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
            raise
        handle = client.get_workflow_handle(workflow_id, run_id=exc.run_id)
        run_id, started = exc.run_id, False
    description = await handle.describe()
    if started:
        await refuse_if_unregistered(client, handle, settings.task_queue, launch.recipe)
    return Started(handle, run_id, started, description)


async def start(
    client: Any,
    settings: Settings,
    launch: Launch,
    workflow_id: str,
    no_wait: bool,
    as_json: bool,
    model_deadline: timedelta | None = None,
) -> int:
    """Start the launch (or attach to the run with that id) and follow it; `model_deadline`
    is how long its model calls may retry, instead of the recipe's default."""
    summary = launch.summary
    run = await start_run(client, settings, launch, workflow_id, model_deadline)
    handle, run_id, started, description = run.handle, run.run_id, run.started, run.description
    state = state_name(description)
    url = settings.workflow_url(workflow_id, run_id)
    if not started:
        existing = await description.static_summary()
        if existing and existing != summary:
            note(f"starter: note: workflow {workflow_id} was started for {existing!r}; using it")
    if no_wait:
        if state == "RUNNING":
            await warn_if_no_worker(client, settings, description.task_queue)
        if as_json:
            emit_json(workflow_id, run_id, state, None, url)
        else:
            if started:
                say(f"started workflow {workflow_id} (run {run_id})")
            else:
                say(f"workflow {workflow_id} already exists ({state}, run {run_id})")
            say(f"Web UI: {url}")
            say(f"result: durafact result {quoted(workflow_id)}")
            if launch.asks_approval:
                say(f"answer: durafact approve {quoted(workflow_id)} {ANSWER_HINT}")
        return 0
    if not as_json:
        if started:
            say(f"started workflow {workflow_id} (run {run_id})")
        elif state == "RUNNING":
            say(f"attached to the running workflow {workflow_id} (run {run_id})")
        else:
            say(f"workflow {workflow_id} already finished ({state}, run {run_id}); its result:")
        say(f"Web UI: {url}")
    return await wait_and_print(
        client, settings, handle, description, run_id, url, as_json, launch.recipe.result_type
    )
