"""Properties of the pure core, over generated inputs (hypothesis): answer-batch
validation, number parsing and Decimal arithmetic.

Each property is checked against an independent oracle (exact `Fraction` arithmetic,
the batch built to break exactly one rule), so a regression shows up as a concrete
counterexample. Settings are per test: a fixed derandomized run, no example database.
"""

from __future__ import annotations

from decimal import Decimal
from fractions import Fraction
from typing import Any

import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from durafact._core.answer_flow import AnswerBatchError, AnswerItem, validate_answer_batch
from durafact._core.arithmetic import column_values, compute, parse_number
from durafact._core.sources import SourceError
from tests.properties import FAST, JSON

# --- answer batches --------------------------------------------------------------------


@st.composite
def valid_batches(draw: st.DrawFn, min_items: int = 1) -> tuple[list[str], list[dict[str, Any]]]:
    """A request and items that cover it: every input in some item, an input possibly
    split across several items, item ids distinct."""
    input_ids = draw(st.lists(st.text(max_size=6), min_size=1, max_size=6, unique=True))
    count = draw(st.integers(max(min_items, 1), max(min_items, len(input_ids) + 2)))
    groups: list[list[str]] = [[] for _ in range(count)]
    for index, input_id in enumerate(input_ids):  # every input covered at least once
        groups[draw(st.integers(0, count - 1)) if index else 0].append(input_id)
    for group in groups:  # no item left without inputs; inputs may repeat across items
        if not group:
            group.append(draw(st.sampled_from(input_ids)))
    item_ids = draw(st.lists(st.text(max_size=6), min_size=count, max_size=count, unique=True))
    items = [
        {"id": item_id, "input_ids": group, "data": draw(JSON)}
        for item_id, group in zip(item_ids, groups, strict=True)
    ]
    return input_ids, items


def rejected(input_ids: Any, items: Any, max_items: Any, reason: str) -> None:
    with pytest.raises(AnswerBatchError, match=reason):
        validate_answer_batch(input_ids, items, max_items)


@FAST
@given(valid_batches(), st.integers(0, 5), st.booleans())
def test_a_valid_batch_is_accepted_as_dicts_or_items(
    batch: tuple[list[str], list[dict[str, Any]]], spare: int, typed: bool
) -> None:
    input_ids, items = batch
    given_items = [AnswerItem.model_validate(item) for item in items] if typed else items
    validate_answer_batch(input_ids, given_items, len(items) + spare)


@FAST
@given(valid_batches(min_items=2), st.data())
def test_two_items_with_one_id_are_rejected(batch: Any, data: st.DataObject) -> None:
    input_ids, items = batch
    first, second = data.draw(
        st.lists(st.integers(0, len(items) - 1), min_size=2, max_size=2, unique=True)
    )
    items[second]["id"] = items[first]["id"]
    rejected(input_ids, items, len(items), "two items share the id")


@FAST
@given(valid_batches(), st.text(max_size=6))
def test_an_input_no_item_covers_is_rejected(batch: Any, extra: str) -> None:
    input_ids, items = batch
    assume(extra not in input_ids)
    rejected([*input_ids, extra], items, len(items), "covered by no item")


@FAST
@given(valid_batches(), st.text(max_size=6), st.data())
def test_an_item_naming_an_unknown_input_is_rejected(
    batch: Any, unknown: str, data: st.DataObject
) -> None:
    input_ids, items = batch
    assume(unknown not in input_ids)
    data.draw(st.sampled_from(items))["input_ids"].append(unknown)
    rejected(input_ids, items, len(items), "which is not in the request")


@FAST
@given(valid_batches(min_items=2), st.data())
def test_more_items_than_max_items_are_rejected(batch: Any, data: st.DataObject) -> None:
    input_ids, items = batch
    max_items = data.draw(st.integers(1, len(items) - 1))
    rejected(input_ids, items, max_items, rf"more than max_items={max_items}")


@FAST
@given(valid_batches(), st.data())
def test_empty_requests_duplicate_inputs_and_empty_items_are_rejected(
    batch: Any, data: st.DataObject
) -> None:
    input_ids, items = batch
    rejected(input_ids, [], 5, "has no items")
    rejected([], items, len(items), "no input ids")
    twice = data.draw(st.sampled_from(input_ids))
    rejected([*input_ids, twice], items, len(items), "appears more than once in the request")
    item = data.draw(st.sampled_from(items))
    item["input_ids"] = []
    rejected(input_ids, items, len(items), "has no input ids")
    item["input_ids"] = [twice, twice]
    rejected(input_ids, items, len(items), "twice")


@FAST
@given(JSON, JSON, JSON)
def test_any_json_values_are_accepted_or_rejected_with_an_answer_batch_error(
    input_ids: Any, items: Any, max_items: Any
) -> None:
    try:
        validate_answer_batch(input_ids, items, max_items)
    except AnswerBatchError as exc:
        assert str(exc)


@FAST
@given(st.lists(JSON, max_size=4), st.lists(JSON, max_size=4), st.integers(-3, 8))
def test_lists_of_any_json_are_accepted_or_rejected_with_an_answer_batch_error(
    input_ids: list[Any], items: list[Any], max_items: int
) -> None:
    try:
        validate_answer_batch(input_ids, items, max_items)
    except AnswerBatchError as exc:
        assert str(exc)


# --- numbers in table cells ------------------------------------------------------------

SPACES = st.sampled_from([" ", "\u00a0", "\u202f", "\u2009"])


@st.composite
def written_numbers(draw: st.DrawFn) -> tuple[str, Fraction, bool]:
    """A number as a table may write it, its exact value, and whether it uses the
    decimal comma: plain, grouped by commas or spaces, with an exponent, signed."""
    negative = draw(st.booleans())
    whole = draw(st.integers(0, 10**20))
    fraction = draw(st.text("0123456789", max_size=12))
    value = Fraction(whole) + (Fraction(int(fraction), 10 ** len(fraction)) if fraction else 0)
    style = draw(st.sampled_from(["plain", "commas", "spaces", "exponent", "decimal_comma"]))
    sign = "-" if negative else draw(st.sampled_from(["", "+"]))
    if style == "commas":
        digits = f"{whole:,}"
    elif style in ("spaces", "decimal_comma"):
        digits = f"{whole:,}".replace(",", draw(SPACES))
    else:
        digits = str(whole)
    point = "," if style == "decimal_comma" else "."
    text = f"{sign}{digits}{point}{fraction}" if fraction else f"{sign}{digits}"
    if style == "exponent":
        exponent = draw(st.integers(-30, 30))
        text += f"{draw(st.sampled_from('eE'))}{exponent:+d}"
        value *= Fraction(10) ** exponent
    padding = draw(st.sampled_from(["", " ", "\u00a0"]))
    return padding + text + padding, -value if negative else value, style == "decimal_comma"


@FAST
@given(written_numbers())
def test_numbers_in_the_accepted_spellings_parse_exactly(written: Any) -> None:
    text, value, decimal_comma = written
    assert Fraction(parse_number(text, decimal_comma=decimal_comma)) == value


@FAST
@given(st.decimals(allow_nan=False, allow_infinity=False))
def test_a_decimal_written_by_python_parses_back_to_itself(value: Decimal) -> None:
    assert parse_number(str(value)) == value
    assert parse_number(format(value, "f")) == value


NOT_NUMBERS = st.sampled_from(
    ["$", "€", "%", "_", "a", "x", "n/a", "NaN", "nan", "Infinity", "inf", "sNaN", "--", "++"]
)


@FAST
@given(written_numbers(), NOT_NUMBERS, st.data())
def test_a_number_with_anything_else_in_it_is_a_source_error(
    written: Any, junk: str, data: st.DataObject
) -> None:
    text, _, decimal_comma = written
    at = data.draw(st.integers(0, len(text)))
    with pytest.raises(SourceError, match="not a number"):
        parse_number(text[:at] + junk + text[at:], decimal_comma=decimal_comma)


@FAST
@given(st.integers(0, 999), st.integers(1, 99) | st.integers(1000, 10**6))
def test_a_comma_that_does_not_group_thousands_is_refused_without_decimal_comma(
    whole: int, part: int
) -> None:
    with pytest.raises(SourceError, match="not a number"):
        parse_number(f"{whole},{part}")  # "12,5": a decimal comma, never guessed
    with pytest.raises(SourceError, match="decimal comma expected"):
        parse_number(f"{whole}.{part}", decimal_comma=True)


@FAST
@given(st.text(max_size=20), st.booleans())
def test_any_text_is_a_finite_decimal_or_a_source_error(text: str, decimal_comma: bool) -> None:
    try:
        value = parse_number(text, decimal_comma=decimal_comma)
    except SourceError as exc:
        assert "not a number" in str(exc)
    else:
        assert value.is_finite()


@FAST
@given(st.lists(written_numbers(), min_size=1, max_size=6))
def test_column_values_are_the_cells_numbers_in_row_order(written: Any) -> None:
    decimal_comma = written[0][2]
    kept = [(text, value) for text, value, comma in written if comma == decimal_comma]
    table = [{"item": f"row{i}", "price": text} for i, (text, _) in enumerate(kept)]
    values = column_values(table, "price", decimal_comma=decimal_comma)
    assert [Fraction(v) for v in values] == [value for _, value in kept]
    with pytest.raises(SourceError, match="column 'price'"):
        column_values([*table, {"item": "x", "price": "n/a"}], "price")
    with pytest.raises(SourceError, match="no column 'cost'"):
        column_values(table, "cost")


# --- Decimal arithmetic ------------------------------------------------------------------

# Decimals of up to 40 digits and exponents either side of zero, built from strings
# (exact: no context rounds them on the way in).
DECIMALS = st.builds(
    lambda digits, exponent: Decimal(f"{digits}E{exponent}"),
    st.integers(-(10**40), 10**40),
    st.integers(-30, 12),
)
SHORT_DECIMALS = st.builds(
    lambda digits, exponent: Decimal(f"{digits}E{exponent}"),
    st.integers(-(10**12), 10**12),
    st.integers(-6, 4),
)


def exact(values: list[Decimal]) -> list[Fraction]:
    return [Fraction(v) for v in values]


@FAST
@given(st.lists(DECIMALS, max_size=8))
def test_count_is_the_number_of_values(values: list[Decimal]) -> None:
    assert compute("count", values) == (Decimal(len(values)), False)


@FAST
@given(st.lists(DECIMALS, min_size=1, max_size=8), st.sampled_from(["min", "max"]))
def test_min_and_max_are_one_of_the_values_exactly(values: list[Decimal], op: Any) -> None:
    value, rounded = compute(op, values)
    expected = (min if op == "min" else max)(exact(values))
    assert (Fraction(value), rounded) == (expected, False)


@FAST
@given(st.lists(SHORT_DECIMALS, min_size=1, max_size=8))
def test_a_sum_within_28_digits_is_exact_and_not_rounded(values: list[Decimal]) -> None:
    value, rounded = compute("sum", values)
    assert (Fraction(value), rounded) == (sum(exact(values)), False)


@FAST
@given(st.lists(DECIMALS, min_size=1, max_size=8))
def test_sum_says_rounded_exactly_when_it_differs_from_the_exact_sum(
    values: list[Decimal],
) -> None:
    value, rounded = compute("sum", values)
    total = sum(exact(values))
    assert rounded == (Fraction(value) != total), (value, total)
    if rounded:  # cut at 28 significant digits, no further
        assert abs(Fraction(value) - total) <= abs(total) * Fraction(1, 10**27)


@FAST
@given(st.lists(SHORT_DECIMALS, min_size=1, max_size=8))
def test_mean_says_rounded_exactly_when_it_differs_from_the_exact_mean(
    values: list[Decimal],
) -> None:
    value, rounded = compute("mean", values)
    mean = sum(exact(values)) / len(values)
    assert rounded == (Fraction(value) != mean), (value, mean)
    if rounded:  # cut to two more places than the inputs have
        places = max(0, *(-v.as_tuple().exponent for v in values))
        assert abs(Fraction(value) - mean) <= Fraction(1, 2 * 10 ** (places + 2))


@FAST
@given(st.lists(DECIMALS, min_size=1, max_size=8))
def test_mean_of_long_decimals_says_rounded_exactly_when_it_differs(
    values: list[Decimal],
) -> None:
    value, rounded = compute("mean", values)
    mean = sum(exact(values)) / len(values)
    assert rounded == (Fraction(value) != mean), (value, mean)


def test_compute_refuses_an_empty_list_except_for_count() -> None:
    for op in ("sum", "mean", "min", "max"):
        with pytest.raises(ValueError, match="no values"):
            compute(op, [])  # type: ignore[arg-type]
