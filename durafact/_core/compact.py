"""Models stored on every model call, serialized without what holds nothing.

A request and its response are written to history on every model call, and the
optional fields a call does not use (no tools, no stop sequences, no conversation)
were most of a request's bytes. A `Compact` model leaves out a field that is None,
or an empty list where that is its default, and the fields it names in
`omitted_defaults` when they hold their default; reading fills them in again from
the defaults, so the value read back is the value written.
"""

from __future__ import annotations

import functools
from typing import Any, ClassVar

from pydantic import BaseModel, SerializerFunctionWrapHandler, model_serializer


class Compact(BaseModel):
    omitted_defaults: ClassVar[frozenset[str]] = frozenset()

    @model_serializer(mode="wrap")
    def _without_empty(self, handler: SerializerFunctionWrapHandler) -> Any:
        data = handler(self)
        if not isinstance(data, dict):
            return data
        model = type(self)
        empty, defaults = _empty_fields(model), _defaults(model)
        return {
            k: v
            for k, v in data.items()
            if not (k in empty and (v is None or v == []))
            and not (k in defaults and getattr(self, k) == defaults[k])
        }


@functools.cache
def _empty_fields(model: type[BaseModel]) -> frozenset[str]:
    """The optional fields of `model` whose default is None or an empty list."""
    return frozenset(
        name
        for name, field in model.model_fields.items()
        if not field.is_required() and field.get_default(call_default_factory=True) in (None, [])
    )


@functools.cache
def _defaults(model: type[Compact]) -> dict[str, Any]:
    fields = model.model_fields
    return {name: fields[name].get_default() for name in model.omitted_defaults}
