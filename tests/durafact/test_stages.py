"""changed_fields / earliest_stage / downstream_fields: the seed's repair example and the
edges the seed leaves open (None, unmapped fields, unknown stages)."""

from __future__ import annotations

import pytest
from pydantic import BaseModel

from durafact._core.stages import changed_fields, downstream_fields, earliest_stage

FIELD_STAGES = {"room": "collect", "style": "design_choice", "area": "plan", "budget": "estimate"}
ORDER = ("collect", "design_choice", "plan", "estimate")


class Info(BaseModel):
    room: str | None = None
    style: str | None = None
    area: float | None = None
    budget: int | None = None


class Dimensions(BaseModel):
    width: float
    length: float


class Room(BaseModel):
    name: str
    size: Dimensions | None = None
    tags: list[str] = []


OLD = Info(room="kitchen", style="loft", area=12.5, budget=3000)


def stage_of(changed: set[str]) -> str | None:
    return earliest_stage(changed, field_stages=FIELD_STAGES, order=ORDER)


def reset_by(target: str | None) -> set[str]:
    return downstream_fields(target, field_stages=FIELD_STAGES, order=ORDER)


def test_the_seed_example_rebuilds_from_the_style_and_keeps_the_room() -> None:
    new = OLD.model_copy(update={"style": "scandi", "budget": 5000})
    changed = changed_fields(OLD, new)
    assert changed == {"style", "budget"}
    target = stage_of(changed)
    assert target == "design_choice"
    assert reset_by(target) == {"style", "area", "budget"}


def test_a_field_that_became_none_is_not_a_change() -> None:
    forgot = Info(room="kitchen", style=None, area=None, budget=None)
    assert changed_fields(OLD, forgot) == set()
    assert changed_fields(OLD, Info()) == set()
    # ...but a value where there was None is.
    assert changed_fields(Info(), OLD) == {"room", "style", "area", "budget"}


def test_fields_compare_by_value_not_identity_or_type_of_container() -> None:
    before = Room(name="hall", size=Dimensions(width=2, length=3), tags=["a"])
    same = Room(name="hall", size=Dimensions(width=2.0, length=3.0), tags=["a"])
    assert changed_fields(before, same) == set()
    wider = Room(name="hall", size=Dimensions(width=2.5, length=3), tags=["a"])
    assert changed_fields(before, wider) == {"size"}
    assert changed_fields(before, same.model_copy(update={"tags": ["a", "b"]})) == {"tags"}
    # Dicts, and a dict against a model, compare the same way.
    assert changed_fields({"room": "kitchen", "budget": 1}, {"room": "kitchen", "budget": 2}) == {
        "budget"
    }
    assert changed_fields(OLD, {"room": "kitchen", "budget": 3000, "style": None}) == set()
    assert changed_fields({"size": {"width": 2.0, "length": 3.0}}, same) == {"name", "tags"}


def test_a_field_only_the_new_record_has_counts_unless_it_is_none() -> None:
    assert changed_fields({"room": "hall"}, {"room": "hall", "area": 9}) == {"area"}
    assert changed_fields({"room": "hall"}, {"room": "hall", "area": None}) == set()


def test_nothing_changed_means_no_stage_and_nothing_to_reset() -> None:
    assert stage_of(changed_fields(OLD, OLD.model_copy())) is None
    assert stage_of(set()) is None
    assert reset_by(None) == set()


@pytest.mark.parametrize(
    ("changed", "target", "reset"),
    [
        ({"room"}, "collect", {"room", "style", "area", "budget"}),
        ({"budget"}, "estimate", {"budget"}),  # the target stage itself is included
        ({"area", "budget"}, "plan", {"area", "budget"}),
        ({"budget", "room"}, "collect", {"room", "style", "area", "budget"}),
    ],
)
def test_the_earliest_stage_wins_and_everything_from_it_on_is_reset(
    changed: set[str], target: str, reset: set[str]
) -> None:
    assert stage_of(changed) == target
    assert reset_by(target) == reset


def test_fields_no_stage_uses_are_ignored() -> None:
    assert stage_of({"notes"}) is None
    assert stage_of({"notes", "area"}) == "plan"


def test_a_stage_without_fields_still_orders_the_rest() -> None:
    order = ("intake", *ORDER)
    assert downstream_fields("intake", field_stages=FIELD_STAGES, order=order) == set(FIELD_STAGES)


def test_unknown_stage_names_are_clear_errors() -> None:
    with pytest.raises(ValueError, match=r"unknown stage 'review'; the stages are 'collect'"):
        reset_by("review")
    bad = {**FIELD_STAGES, "colour": "paint"}
    with pytest.raises(ValueError, match=r"unknown stage\(s\) 'paint' \(for colour\)"):
        earliest_stage({"room"}, field_stages=bad, order=ORDER)
    with pytest.raises(ValueError, match="unknown stage"):
        downstream_fields("collect", field_stages=bad, order=ORDER)
    with pytest.raises(ValueError, match="'plan' appears twice"):
        earliest_stage({"room"}, field_stages=FIELD_STAGES, order=(*ORDER, "plan"))
    with pytest.raises(ValueError, match="not the string"):
        earliest_stage({"room"}, field_stages={"room": "c"}, order="cde")


def test_records_must_be_models_or_mappings() -> None:
    with pytest.raises(TypeError, match="pydantic model or a mapping"):
        changed_fields(OLD, ["room"])  # type: ignore[arg-type]
