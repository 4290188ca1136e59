"""Fork a finished run from an edited artifact: what a fork keeps, and what it reruns.

A recipe that forks says how its runs are built (`Recipe.fork_rules(ledger)`, a
`ForkRules`): its stages in order, the stage that made each artifact, and the artifacts
a person may edit, each with the first stage that uses it. A fork edits (or removes)
some of them, and by the seeds' rebuild rule (durafact/_core/stages.py) reruns from the
earliest stage an edit affects and keeps everything made upstream of it:

    target = earliest_stage(edited, field_stages=uses, order=order)
    remade = downstream_fields(target, field_stages=made_by, order=order)

So in a plan of three steps, the result of step 2 edited is used first by step 3:
step 3 and the final answer are made again, the plan and the first two results are
kept. `plan_fork` checks the edits and returns the `Fork` the new run takes in its
input (`RecipeSettings.fork`): the run it comes from, what changed, the stage it reruns
from, and each kept stage's artifacts (the edits applied, an edited one a version
later) with the links out of them. The new run's lifecycle takes a kept stage's
artifacts instead of running the stage (`RecipeContext.kept`): no model call, and the
ids and versions of the old run. Its ledger keeps the fork's origin as the artifact
`fork` (`ForkOrigin`), and each edited artifact links `forked_from` -> it.

A value is text for an artifact with a text field (`Editable.text_field`: a step's
description, a result's text), else a JSON object whose fields replace the artifact's;
either is checked against the artifact's model. Every mistake is a `ForkError` of one
line, raised before anything starts. Pure: no I/O.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel, Field, ValidationError

from durafact._core.ledger import Artifact, Ledger, Link
from durafact._core.stages import downstream_fields, earliest_stage

# The artifact a forked run keeps its origin in, and the relation of each edited one to it.
FORK_ID = "fork"
FORKED_FROM = "forked_from"
# How many editable artifacts a refusal names, as examples.
NAMED = 6


class ForkError(ValueError):
    """A one-line reason a fork cannot be made."""


@dataclass(frozen=True)
class Editable:
    """An artifact a fork may change: the first stage that uses it (a fork reruns from
    there), the model its data must fit, the field a text value sets (None: the value
    is JSON), and whether a fork may remove it."""

    uses: str
    model: type[BaseModel]
    text_field: str | None = None
    removable: bool = False


@dataclass
class ForkRules:
    """How a run was built, as its recipe sees it: its stages in order, the stage that
    made each artifact (an artifact of none is made again by the lifecycle, from the
    input), and the artifacts a fork may edit."""

    order: list[str]
    made_by: dict[str, str]
    editable: dict[str, Editable] = field(default_factory=dict)


class ForkOrigin(BaseModel):
    """The artifact `fork` of a forked run: the run it was forked from, how it differs,
    and which of its stages were kept."""

    workflow_id: str
    run_id: str
    edited: list[str] = Field(default_factory=list, description="Artifacts given a new value.")
    removed: list[str] = Field(default_factory=list, description="Artifacts left out.")
    rerun_from: str = Field(description="The first stage the fork ran again.")
    kept: list[str] = Field(default_factory=list, description="The stages taken from the run.")


class Fork(ForkOrigin):
    """What a fork's input carries (`RecipeSettings.fork`): its origin, and the artifacts
    of each kept stage (`stages`, in the order they were made), with the links out of them."""

    stages: dict[str, Ledger] = Field(default_factory=dict)

    def origin(self) -> ForkOrigin:
        return ForkOrigin.model_validate(self.model_dump(exclude={"stages"}))


def text_field(model: type[BaseModel]) -> str | None:
    """The field a text value sets in an artifact of `model`: `text`, else
    `description`, when it is a string field; None when it has neither."""
    for name in ("text", "description"):
        info = model.model_fields.get(name)
        if info is not None and info.annotation is str:
            return name
    return None


def edit_value(artifact: Artifact[Any], editable: Editable) -> str:
    """What a person edits: the text field's value, else the data as JSON."""
    data = _data(artifact)
    if editable.text_field is not None:
        return str(data.get(editable.text_field, ""))
    return json.dumps(data, ensure_ascii=False, indent=2)


def plan_fork(
    ledger: Ledger,
    rules: ForkRules,
    *,
    workflow_id: str,
    run_id: str,
    edits: Mapping[str, Any],
    removed: Sequence[str] = (),
) -> Fork:
    """The fork of the run `workflow_id` (its `ledger`, built by `rules`) with `edits`
    (artifact id -> its new value) and `removed` artifacts; a ForkError when it cannot be."""
    if not edits and not removed:
        raise ForkError("nothing to change: a fork needs an artifact's new value, or one to remove")
    twice = sorted(set(edits) & set(removed))
    if twice:
        raise ForkError(f"{twice[0]} is both edited and removed")
    for artifact_id in [*edits, *removed]:
        check_editable(ledger, rules, workflow_id, artifact_id)
    for artifact_id in removed:
        if not rules.editable[artifact_id].removable:
            raise ForkError(f"{artifact_id} cannot be removed (give it a new value instead)")
    values = {
        artifact_id: _edited(ledger.get(artifact_id), rules.editable[artifact_id], value)
        for artifact_id, value in edits.items()
    }
    uses = {artifact_id: e.uses for artifact_id, e in rules.editable.items()}
    target = earliest_stage([*values, *removed], field_stages=uses, order=rules.order)
    assert target is not None  # every edited artifact is used by a stage
    remade = downstream_fields(target, field_stages=rules.made_by, order=rules.order)
    for artifact_id in [*values, *removed]:
        if artifact_id in remade:
            raise ForkError(
                f"{artifact_id} would be made again: the fork reruns from {target}, which is "
                "upstream of it; fork with one of the edits, then fork that run"
            )
    kept = rules.order[: rules.order.index(target)]
    stages = _kept_stages(ledger, rules, kept, values, remade | set(removed))
    return Fork(
        workflow_id=workflow_id,
        run_id=run_id,
        edited=list(values),
        removed=list(removed),
        rerun_from=target,
        kept=kept,
        stages=stages,
    )


def check_editable(ledger: Ledger, rules: ForkRules, workflow_id: str, artifact_id: str) -> None:
    """A ForkError unless the run's `artifact_id` is one a fork may change."""
    if artifact_id not in ledger:
        raise ForkError(f"run {workflow_id} has no artifact {artifact_id!r}")
    if artifact_id in rules.editable:
        return
    names = [i for i in ledger.artifacts if i in rules.editable]
    shown = ", ".join(names[:NAMED]) + (", ..." if len(names) > NAMED else "")
    raise ForkError(
        f"{artifact_id} cannot be edited in a fork: nothing of the run is built from it, or "
        f"code made it from other artifacts (editable: {shown or 'none'})"
    )


def _data(artifact: Artifact[Any]) -> dict[str, Any]:
    data = artifact.data
    return data.model_dump(mode="json") if isinstance(data, BaseModel) else dict(data)


def _edited(artifact: Artifact[Any], editable: Editable, value: Any) -> dict[str, Any]:
    """The artifact's data with `value` in it, checked against its model; a ForkError
    when the value does not fit, or changes nothing."""
    old = _data(artifact)
    if isinstance(value, str) and editable.text_field is not None:
        value = {editable.text_field: value}
    elif isinstance(value, str):
        try:
            value = json.loads(value)
        except json.JSONDecodeError as exc:
            raise ForkError(
                f"{artifact.id} is a {artifact.type}: its new value is a JSON object of the "
                f"fields to change ({exc.msg} at column {exc.colno})"
            ) from None
    if not isinstance(value, Mapping):
        raise ForkError(f"{artifact.id}: the new value must be a JSON object of its fields")
    try:
        new = editable.model.model_validate({**old, **value}).model_dump(mode="json")
        before = editable.model.model_validate(old).model_dump(mode="json")
    except ValidationError as exc:
        error = exc.errors()[0]
        where = ".".join(str(part) for part in error["loc"]) or "value"
        raise ForkError(f"{artifact.id}: {where}: {error['msg']}") from None
    if new == before:
        raise ForkError(f"{artifact.id}: the new value is the one it has: nothing would change")
    return new


def _kept_stages(
    ledger: Ledger,
    rules: ForkRules,
    kept: Iterable[str],
    values: Mapping[str, dict[str, Any]],
    gone: set[str],
) -> dict[str, Ledger]:
    """Each kept stage's artifacts in the order they were made, an edited one with its
    new value a version later, and the links out of them to what the fork keeps."""
    artifacts: dict[str, dict[str, Artifact[Any]]] = {stage: {} for stage in kept}
    for artifact in ledger.all():
        stage = rules.made_by.get(artifact.id)
        if stage not in artifacts or artifact.id in gone:
            continue
        if artifact.id in values:
            artifact = Artifact[Any](
                id=artifact.id,
                type=artifact.type,
                version=artifact.version + 1,
                data=values[artifact.id],
            )
        artifacts[stage][artifact.id] = artifact
    links: dict[str, list[Link]] = {stage: [] for stage in artifacts}
    for link in ledger.links:
        stage = rules.made_by.get(link.source)
        if stage in artifacts and link.source in artifacts[stage] and link.target not in gone:
            links[stage].append(link)
    return {stage: Ledger(artifacts=artifacts[stage], links=links[stage]) for stage in artifacts}
