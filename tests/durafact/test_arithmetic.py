"""`compute` says exactly when its value is not the exact result: a sum or mean past 28
significant digits is `rounded`, like a mean that does not terminate."""

from __future__ import annotations

import random
from decimal import Decimal, localcontext

import pytest

from durafact._core.arithmetic import PRECISION, compute


def exact_sum(values: list[Decimal]) -> Decimal:
    with localcontext() as context:
        context.prec = 10_000
        return sum(values, Decimal(0))


@pytest.mark.parametrize(
    ("op", "values", "expected"),
    [
        ("sum", ["1" * 30, "1"], Decimal("1.111111111111111111111111111E+29")),
        ("sum", ["1" * 28, "0.5"], Decimal("1" * 27 + "2")),
        ("mean", ["1E+40", "1.05"], Decimal("5.00000000000000000000000000E+39")),
    ],
)
def test_a_sum_or_mean_past_28_significant_digits_is_reported_rounded(
    op: str, values: list[str], expected: Decimal
) -> None:
    assert compute(op, [Decimal(v) for v in values]) == (expected, True)  # type: ignore[arg-type]


def test_exact_results_are_not_reported_rounded() -> None:
    assert compute("sum", [Decimal("1" * 27), Decimal(1)]) == (Decimal("1" * 26 + "2"), False)
    assert compute("sum", [Decimal("1.25"), Decimal("2.50")]) == (Decimal("3.75"), False)
    assert compute("mean", [Decimal("32.00"), Decimal("39.00")]) == (Decimal("35.50"), False)
    # min and max pick a value: however long, it is the exact one.
    long = Decimal("1" * 40)
    assert compute("max", [long, Decimal(1)]) == (long, False)
    assert compute("min", [long, Decimal(1)]) == (Decimal(1), False)


def test_a_mean_that_does_not_terminate_is_cut_and_reported_rounded() -> None:
    ones = [Decimal("1.00"), Decimal("1.00"), Decimal("2.00")]
    assert compute("mean", ones) == (Decimal("1.3333"), True)
    # Too many digits to cut at two more places: all 28 are kept, still rounded.
    value, rounded = compute("mean", [Decimal("1" * 27 + ".5"), Decimal(0), Decimal(0)])
    assert rounded and len(value.as_tuple().digits) == PRECISION


def test_rounded_is_true_exactly_when_the_sum_differs_from_the_exact_sum() -> None:
    generator = random.Random(12)
    for _ in range(2000):
        values = [
            Decimal(generator.randint(-(10**35), 10**35)).scaleb(-generator.randint(0, 12))
            if generator.random() < 0.3
            else Decimal(generator.randint(-(10**6), 10**6)).scaleb(-generator.randint(0, 4))
            for _ in range(generator.randint(1, 6))
        ]
        value, rounded = compute("sum", values)
        assert rounded == (value != exact_sum(values)), values
