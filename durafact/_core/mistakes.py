"""One line for what is wrong in data a person wrote by hand: an answer sent to the
`decide` update, the body of a request to the HTTP API.

pydantic reports a misspelt field twice: as a field the model does not have, and as
the field it was meant for, missing. The line names the first and guesses the second
(`'approve' is not a field of an answer (did you mean 'approved'?)`), since a person
who sees only "approved: Field required" looks for what they left out, not for what
they misspelt.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from difflib import get_close_matches
from typing import Any

UNKNOWN = "extra_forbidden"
MISSING = "missing"


def first_mistake(
    errors: Sequence[Mapping[str, Any]], fields: Iterable[str] = (), what: str = ""
) -> str:
    """One line for pydantic's `errors` (`ValidationError.errors()`): a field that is
    not one of `what` (default: of its parent, by location) with the field of `fields`,
    or the missing one beside it, that it looks like; else the first error."""
    unknown = next((e for e in errors if e["type"] == UNKNOWN), None)
    if unknown is None:
        first = errors[0]
        where = ".".join(map(str, first["loc"]))
        return f"{where!r}: {first['msg']}" if where else first["msg"]
    *parent, name = [str(part) for part in unknown["loc"]]
    missing = [
        str(e["loc"][-1]) for e in errors if e["type"] == MISSING and list(e["loc"][:-1]) == parent
    ]
    guess = get_close_matches(name, missing or list(fields), n=1)
    of = what or ".".join(parent)
    return f"{name!r} is not a field{f' of {of}' if of else ''}" + (
        f" (did you mean {guess[0]!r}?)" if guess else ""
    )
