"""Exact arithmetic for numbers that must never pass through a model.

Table cells are parsed into `Decimal` (`parse_number`, `column_values`), computed
in code (`compute`), written out without scientific notation (`plain`), and the
numbers a text states can be compared with what its support holds
(`unsupported_numbers`). Pure: safe inside the workflow sandbox.

Range. `column_values` and `compute` take numbers below 10**100 in magnitude
(`MAX_DIGITS`) with at most 100 decimal places (`MAX_PLACES`); anything else is a
`NumberOutOfRange` (a `ValueError`). So a value written by `plain` has at most about
230 characters, and no sum or mean of up to a million of them can overflow: a cell
such as `9e999999` or `1e3000000` is refused by name instead of failing a workflow
task or filling a result with three million digits.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from decimal import Decimal, Inexact, InvalidOperation, localcontext
from typing import Literal

from durafact._core.sources import SourceError, SourceRef
from durafact._core.text import shorten

Operation = Literal["sum", "mean", "min", "max", "count"]
PRECISION = 28  # significant digits of `compute`; beyond them a result is `rounded`
MAX_DIGITS = 100  # table numbers stay below 10**MAX_DIGITS in magnitude
MAX_PLACES = 100  # and are written with at most this many decimal places
_SHOWN_CHARS = 40  # how much of a refused cell an error message quotes
# A `{{name}}` placeholder where code puts a computed value.
PLACEHOLDER = re.compile(r"\{\{\s*([A-Za-z][A-Za-z0-9_]{0,31})\s*\}\}")
NUMBER = re.compile(r"\d+(?:[.,]\d+)*")
_WRITTEN_GROUPED = re.compile(r"\d{1,3}(?:,\d{3})+(?:\.\d+)?")
_SPACES = re.compile(r"[\s\u00a0\u202f\u2009]+")
_GROUPED = re.compile(r"^[+-]?\d{1,3}(,\d{3})+(\.\d+)?$")
_PLAIN = re.compile(r"^[+-]?(\d+(\.\d*)?|\.\d+)([eE][+-]?\d+)?$")


class NumberOutOfRange(ValueError):
    """A number beyond what table arithmetic takes (`MAX_DIGITS`, `MAX_PLACES`)."""


def check_range(value: Decimal) -> Decimal:
    """`value` when it is finite, below 10**MAX_DIGITS in magnitude and has at most
    MAX_PLACES decimal places; else `NumberOutOfRange` saying which limit it passes."""
    if not value.is_finite():
        raise NumberOutOfRange(f"{value} is not a finite number")
    if value.adjusted() >= MAX_DIGITS:
        raise NumberOutOfRange(
            f"{_shown(value)} is out of range: table numbers must be below 10**{MAX_DIGITS}"
        )
    if int(value.as_tuple().exponent) < -MAX_PLACES:
        raise NumberOutOfRange(
            f"{_shown(value)} has more than {MAX_PLACES} decimal places; table numbers"
            f" may have at most {MAX_PLACES}"
        )
    return value


def _shown(value: Decimal | str) -> str:
    """A number or cell as an error message quotes it: at most `_SHOWN_CHARS` characters."""
    return repr(shorten(str(value), _SHOWN_CHARS))


def parse_number(text: str, *, decimal_comma: bool = False) -> Decimal:
    """An exact `Decimal` from a table cell, or a `SourceError` saying why not.

    Spaces (also no-break and thin spaces) are thousands separators. By default `.`
    is the decimal point and `,` may only group thousands ("1,234.50"); with
    `decimal_comma=True`, `,` is the decimal point ("1 234,50"). Anything else
    ("12,5" without `decimal_comma`, "$5", "n/a", "NaN") is an error, never a guess.
    """
    cleaned = _SPACES.sub("", str(text))
    if decimal_comma:
        if "." in cleaned:
            raise SourceError(f"not a number (decimal comma expected): {_shown(text)}")
        cleaned = cleaned.replace(",", ".")
    elif _GROUPED.match(cleaned):
        cleaned = cleaned.replace(",", "")
    if not _PLAIN.match(cleaned):
        raise SourceError(f"not a number: {_shown(text)}")
    try:
        return Decimal(cleaned)
    except InvalidOperation:  # pragma: no cover - _PLAIN admits only valid literals
        raise SourceError(f"not a number: {_shown(text)}") from None


def column_values(
    rows: Iterable[Mapping[str, str] | SourceRef],
    column: str,
    *,
    decimal_comma: bool = False,
) -> list[Decimal]:
    """The numbers in `column` of `rows` (dicts, or refs from `CSVSource.search`), in order.

    `sum(column_values(refs, "price"))` is the exact total; a row without the column,
    or with a cell that is not a number or is out of range (`check_range`), raises
    `SourceError` naming it.
    """
    values = []
    for item in rows:
        row = item.metadata.get("row") if isinstance(item, SourceRef) else item
        if not isinstance(row, Mapping):
            raise SourceError(f"not a table row: {item!r}")
        if column not in row:
            raise SourceError(f"row has no column {column!r}: {dict(row)!r}")
        try:
            values.append(check_range(parse_number(row[column], decimal_comma=decimal_comma)))
        except (SourceError, NumberOutOfRange) as exc:
            raise SourceError(f"column {column!r}: {exc}") from None
    return values


def numbers_in(text: str) -> set[Decimal]:
    """The numbers written in `text` (placeholders aside), as values: "14" == "14.00",
    "1,047" == 1047, "12,5" == 12.5."""
    values = set()
    for token in NUMBER.findall(PLACEHOLDER.sub(" ", text)):
        cleaned = (
            token.replace(",", "") if _WRITTEN_GROUPED.fullmatch(token) else token.replace(",", ".")
        )
        if cleaned.count(".") > 1:  # a date or version: each part is a number
            values.update(Decimal(part) for part in cleaned.split(".") if part)
            continue
        try:
            values.add(Decimal(cleaned))
        except InvalidOperation:  # pragma: no cover - NUMBER admits digits only
            continue
    return values


def unsupported_numbers(text: str, support: str) -> list[str]:
    """The numbers `text` states that `support` does not hold, as written in `text`."""
    known = numbers_in(support)
    missing = []
    for token in NUMBER.findall(PLACEHOLDER.sub(" ", text)):
        if not numbers_in(token) <= known:
            missing.append(token)
    return missing


def compute(op: Operation, values: list[Decimal]) -> tuple[Decimal, bool]:
    """(value, rounded). `Decimal` arithmetic: a sum is added up exactly and then
    rounded once to 28 significant digits; `rounded` is True exactly when the value
    is not the exact result (the context's `Inexact` flag): a sum or mean with more
    significant digits than that, or a mean that does not terminate, which is cut to
    two more decimal places than its inputs have (half to even) when that fits in 28
    digits. `min`, `max` and `count` are always exact. A value out of range
    (`check_range`) is a `NumberOutOfRange`."""
    if op == "count":
        return Decimal(len(values)), False
    if not values:
        raise ValueError("no values to compute over")
    for value in values:
        check_range(value)
    if op == "min":
        return min(values), False
    if op == "max":
        return max(values), False
    total = _sum(values)
    with localcontext() as decimal:
        decimal.prec = PRECISION
        decimal.clear_flags()
        if op == "sum":
            value = +total  # rounded once, here
            return value, bool(decimal.flags[Inexact])
        mean = total / len(values)
        if not decimal.flags[Inexact]:
            return mean, False
        places = max(
            -v.as_tuple().exponent for v in values if isinstance(v.as_tuple().exponent, int)
        )
        exponent = -(max(places, 0) + 2)
        if mean.adjusted() - exponent < PRECISION:  # else keep all 28 digits
            mean = mean.quantize(Decimal(1).scaleb(exponent))
        return mean, True


def _sum(values: list[Decimal]) -> Decimal:
    """The exact sum of values in range: at most MAX_DIGITS + MAX_PLACES digits and
    a few for the carries."""
    top = max(v.adjusted() for v in values)
    bottom = min(int(v.as_tuple().exponent) for v in values)
    with localcontext() as decimal:
        decimal.prec = max(PRECISION, top - bottom + len(str(len(values))) + 1)
        return sum(values, Decimal(0))


def plain(value: Decimal) -> str:
    """A decimal written out, never in scientific notation."""
    return format(value, "f")
