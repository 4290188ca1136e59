"""Checking what a person gives a new run, before anything starts: its id, its input
against the recipe's input model (and the rules some inputs keep beyond their types),
and whether it can be sent at all. Each refusal is `Invalid` (`InvalidInput`, with
pydantic's errors, for input that does not fit), one line that names what is wrong.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from pydantic import BaseModel, TypeAdapter, ValidationError
from temporalio.contrib.pydantic import pydantic_data_converter

from durafact._core.answer_flow import AnswerBatchError
from durafact._core.text import one_line
from durafact._recipes.answer_flow import AnswerBatchInput, check_answer_batch
from durafact._service.errors import Invalid, InvalidInput

# Inputs over the payload threshold are stored outside Temporal (durafact/_runtime/payloads.py),
# so Temporal's 2 MB limit no longer caps them. This one does: 10 MB of text is more than
# any model's context window holds (1M tokens is about 4 MB), and every model call that
# carries the input stores another copy of it.
MAX_INPUT_BYTES = 10_000_000
MAX_INPUT_DEPTH = 100  # JSON nesting of an input; deeper is refused before it is parsed on
# Inputs whose rules go beyond their types, each with the check its recipe's workflow makes
# as it starts, made here first: every door refuses what would fail the run.
INPUT_RULES: dict[type, Callable[[Any], object]] = {AnswerBatchInput: check_answer_batch}


def check_new_id(workflow_id: str) -> str:
    """`workflow_id`, when a person may give it to a new run or chat; else Invalid. An
    id cannot hold '/': that is how the agents of a run's steps are named
    (`{run}/{step}`), and one started by hand could take an agent's id."""
    if not workflow_id.strip():
        raise Invalid("the workflow id is empty")
    if "/" in workflow_id:
        raise Invalid("the id holds '/', which names the agents of a run's steps")
    check_path_id(workflow_id)
    return workflow_id


def check_path_id(workflow_id: str) -> None:
    """Invalid when a step of the id, between its '/'s, is `.` or `..`: a URL resolves
    those away (the console's link to run `..` opens `/`, and `/api/runs/.` is the list
    of runs), so no route could name the run."""
    if any(step in (".", "..") for step in workflow_id.split("/")):
        raise Invalid(
            f"the id {workflow_id!r} has '.' or '..' as a path step, which a URL cannot name"
        )


def validated(kind: Any, data: Any, where: str = "--input") -> Any:
    """`data` as an instance of `kind` (the run method's type hint), or InvalidInput
    saying which field is wrong and why (`where` names the input: the option, or the
    API's field)."""
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


def checked(
    model: Any, values: Any, *, positional: str, options: dict[str, str] | None = None
) -> Any:
    """`model` from a command's values, or Invalid naming the option. `positional` is
    the field the command's argument fills (named: an input's first field may be one of
    its settings'); `options` names the option of each field it fills."""
    try:
        return TypeAdapter(model).validate_python(values)
    except ValidationError as exc:
        error = exc.errors()[0]
        field = str(error["loc"][0]) if error["loc"] else ""
        reason = one_line(str(error.get("ctx", {}).get("error") or error["msg"]))
        if field and field != positional:
            option = (options or {}).get(field) or f"--{field.replace('_', '-')}"
            reason = f"{option}: {reason}"
        raise Invalid(reason) from None


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


def check_sendable(args: list[Any]) -> None:
    """Refuse input the data converter cannot encode (text that is not valid Unicode,
    such as a lone surrogate written as a JSON escape) and input over MAX_INPUT_BYTES."""
    try:
        payloads = pydantic_data_converter.payload_converter.to_payloads(args)
    except Exception as exc:
        reason = one_line(str(exc))
        if "surrogates not allowed" in reason:
            reason = "it holds text that is not valid Unicode (a lone surrogate such as \\ud800)"
        raise Invalid(f"the input cannot be sent to Temporal: {reason}") from None
    size = sum(len(payload.data) for payload in payloads)
    if size > MAX_INPUT_BYTES:
        raise Invalid(
            f"the input is {size:,} bytes, over the {MAX_INPUT_BYTES:,} a workflow input may "
            "hold; put large content in a source (such as --docs DIR) and pass its location"
        )


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
