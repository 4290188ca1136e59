"""Change -> rebuild: which stages a corrected fact forces a multi-stage flow to redo.

A flow that builds in stages (`collect`, `design_choice`, `plan`, `estimate`) maps
each fact to the first stage that uses it. When a person corrects some facts, the
flow rebuilds from the earliest stage any of them affects and keeps everything
upstream of it:

    field_stages = {"room": "collect", "style": "design_choice",
                    "area": "plan", "budget": "estimate"}
    order = ("collect", "design_choice", "plan", "estimate")

    changed = changed_fields(old, new)                  # {"style", "budget"}
    target = earliest_stage(changed, field_stages=field_stages, order=order)
    reset = downstream_fields(target, field_stages=field_stages, order=order)
    # target == "design_choice"; reset == {"style", "area", "budget"}

Semantics:

- `changed_fields` compares field by field, by value (nested models and lists
  compare by content, not identity). A field whose new value is `None` is not a
  change: `None` means "not known", not "erase", so a model that did not repeat a
  fact never discards it. A field only `new` has counts when it is not `None`.
- `earliest_stage` returns `None` when nothing changed. Changed fields that
  `field_stages` does not map are ignored: they feed no stage, so they force no
  rebuild (a flow that must not accept such fields checks them at its boundary).
- `downstream_fields` includes the target stage itself: every field whose stage is
  the target or later is reset; a `None` target (nothing changed) resets nothing.
- A stage name that is not in `order` (in `field_stages` or as the target), or an
  `order` that names a stage twice, is a `ValueError` naming it.

Pure and deterministic: safe inside the Temporal workflow sandbox.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from pydantic import BaseModel

__all__ = ["changed_fields", "downstream_fields", "earliest_stage"]

Record = BaseModel | Mapping[str, Any]


def _values(record: Record) -> dict[str, Any]:
    if isinstance(record, BaseModel):
        # Dumped, so nested models compare by value whatever their class identity.
        return record.model_dump(mode="python")
    if isinstance(record, Mapping):
        return {
            k: v.model_dump(mode="python") if isinstance(v, BaseModel) else v
            for k, v in record.items()
        }
    raise TypeError(f"expected a pydantic model or a mapping, not {type(record).__name__}")


def changed_fields(old: Record, new: Record) -> set[str]:
    """The fields of `new` that hold a value (not `None`) different from `old`'s."""
    before, after = _values(old), _values(new)
    return {
        name for name, value in after.items() if value is not None and before.get(name) != value
    }


def _positions(field_stages: Mapping[str, str], order: Sequence[str]) -> dict[str, int]:
    """Each stage's position in `order`, after checking `order` and `field_stages`."""
    if isinstance(order, str):
        raise ValueError(f"order must be a sequence of stage names, not the string {order!r}")
    positions: dict[str, int] = {}
    for i, stage in enumerate(order):
        if stage in positions:
            raise ValueError(f"stage {stage!r} appears twice in order {tuple(order)!r}")
        positions[stage] = i
    unknown = sorted({s for s in field_stages.values() if s not in positions})
    if unknown:
        fields = sorted(f for f, s in field_stages.items() if s in unknown)
        raise ValueError(
            f"field_stages names unknown stage(s) {', '.join(map(repr, unknown))} "
            f"(for {', '.join(fields)}); the stages are {', '.join(map(repr, order))}"
        )
    return positions


def earliest_stage(
    changed: Iterable[str], *, field_stages: Mapping[str, str], order: Sequence[str]
) -> str | None:
    """The first stage in `order` that a changed field feeds; `None` when none does."""
    positions = _positions(field_stages, order)
    stages = {field_stages[name] for name in changed if name in field_stages}
    return min(stages, key=positions.__getitem__) if stages else None


def downstream_fields(
    target: str | None, *, field_stages: Mapping[str, str], order: Sequence[str]
) -> set[str]:
    """Every field whose stage is `target` or a later one; empty for a `None` target."""
    positions = _positions(field_stages, order)
    if target is None:
        return set()
    if target not in positions:
        raise ValueError(f"unknown stage {target!r}; the stages are {', '.join(map(repr, order))}")
    start = positions[target]
    return {name for name, stage in field_stages.items() if positions[stage] >= start}
