"""durafact._core.budget: the arithmetic a run's budget is kept with, and what people read."""

from __future__ import annotations

import re
from datetime import timedelta
from decimal import Decimal

import pytest
from pydantic import ValidationError

from durafact._core.budget import Budget, Spent, money, parse_cost, parse_tokens
from durafact._core.llm import Usage


def used(tokens: int, cost: str | None = "0") -> Usage:
    return Usage(
        prompt_tokens=tokens,
        total_tokens=tokens,
        cost=None if cost is None else Decimal(cost),
    )


def test_a_call_may_start_while_a_token_is_left_and_its_max_tokens_fit() -> None:
    budget = Budget(tokens=100)
    assert not budget.exhausted(used(99))
    assert budget.exhausted(used(100))  # nothing left: even a call without max_tokens waits
    assert not budget.exhausted(used(90), committed=10)
    assert budget.exhausted(used(90), committed=11)  # its own max_tokens counted


def test_a_cost_budget_is_spent_once_the_cost_reaches_it() -> None:
    budget = Budget(cost=Decimal("1.00"))
    assert not budget.exhausted(used(10**6, "0.99"))
    assert budget.exhausted(used(10, "1.00"))
    assert not budget.exhausted(used(10**6, "0.99"), committed=10**6)  # tokens are not limited


def test_the_question_says_what_was_spent_and_by_how_much_it_would_grow() -> None:
    budget = Budget(tokens=40_000, on_exhausted="ask")
    assert budget.question(used(41_200, "0.83"), budget) == (
        "spent 41,200 of 40,000 tokens (cost 0.83); extend by 40,000 tokens?"
    )
    both = Budget(tokens=40_000, cost=Decimal("1"), on_exhausted="ask")
    assert both.question(used(39_900, "1.0042"), both, committed=500) == (
        "spent 39,900 of 40,000 tokens and cost 1.00 of 1.00; the next call may write 500 "
        "more; extend by 40,000 tokens and cost 1.00?"
    )
    costly = Budget(cost=Decimal("0.005"))
    assert costly.spent_text(used(700, "0.0051")) == "spent cost 0.0051 of 0.005 (700 tokens)"


def test_a_child_gets_what_is_left() -> None:
    budget = Budget(tokens=1000, cost=Decimal("2"), on_exhausted="ask")
    left = budget.remaining(used(400, "0.5"))
    assert left == Budget(tokens=600, cost=Decimal("1.5"), on_exhausted="ask")


def test_an_approval_extends_by_the_first_budget_or_to_the_limits_it_sets() -> None:
    first = Budget(tokens=1000, on_exhausted="ask")
    later = Budget(tokens=2000, on_exhausted="ask")
    assert later.extended(first, {}, used(2100)).tokens == 3000
    assert later.extended(first, {"tokens": "80000"}, used(2100)).tokens == 80_000


@pytest.mark.parametrize(
    ("changes", "reason"),
    [
        ({"cost": "5"}, "cost: not a limit of this budget (it limits tokens)"),
        ({"tokens": "lots"}, "tokens: 'lots' is not a whole number of tokens above 0"),
        ({"tokens": "2000"}, "tokens=2000 leaves nothing for the next call: 2,100 are spent"),
        ({"tokens": "2150"}, "2,100 are spent and 100 more may be written"),
    ],
)
def test_an_approval_whose_limit_cannot_be_taken_is_refused_naming_it(
    changes: dict[str, str], reason: str
) -> None:
    budget = Budget(tokens=2000, on_exhausted="ask")
    with pytest.raises(ValueError, match=re.escape(reason)):
        budget.extended(budget, changes, used(2100), committed=100)


@pytest.mark.parametrize(
    ("fields", "reason"),
    [
        ({}, "a budget needs tokens, cost or both"),
        ({"on_exhausted": "ask"}, "a budget needs tokens, cost or both"),
        ({"tokens": 0}, "greater than or equal to 1"),
        ({"cost": "-1"}, "greater than 0"),
        ({"cost": "nan"}, "cost must be a finite number"),
        ({"cost": True}, "Decimal input should be"),
        ({"tokens": 5, "on_exhausted": "wait"}, "'fail' or 'ask'"),
        ({"tokens": 5, "ask_timeout": -1}, "ask_timeout must be positive"),
    ],
)
def test_a_budget_that_limits_nothing_or_with_a_bad_value_is_refused(
    fields: dict, reason: str
) -> None:
    with pytest.raises(ValidationError, match=reason):
        Budget.model_validate(fields)


def test_limits_as_typed() -> None:
    assert parse_tokens("80000") == 80_000
    assert parse_cost(" 2.50 ") == Decimal("2.50")
    for bad in ["0", "-5", "1e3", "8 000", "9" * 16, ""]:
        with pytest.raises(ValueError, match="is not a whole number of tokens above 0"):
            parse_tokens(bad, "tokens")
    for bad in ["0", "-1", "nan", "Infinity", "abc", ""]:
        with pytest.raises(ValueError, match="is not an amount above 0"):
            parse_cost(bad, "cost")


def test_what_was_spent_is_found_among_a_failures_details_as_decoded() -> None:
    spent = Spent(usage=used(120), budget=Budget(tokens=100))
    assert Spent.among(["a detail", spent.model_dump(mode="json")]) == spent
    assert Spent.among(["a detail", {"usage": "not a usage"}]) is None
    assert Spent.among(None) is None


def test_money_reads_as_people_write_it() -> None:
    assert [money(Decimal(v)) for v in ("0", "0.8312", "1234.5", "0.0042")] == [
        "0.00",
        "0.83",
        "1,234.50",
        "0.0042",
    ]
    assert money(None) == "unknown"


def test_a_budget_reads_from_json_in_strict_mode_too() -> None:
    budget = Budget.model_validate(
        {"tokens": 5, "cost": "0.5", "on_exhausted": "ask", "ask_timeout": 60}, strict=True
    )
    assert (budget.cost, budget.ask_timeout) == (Decimal("0.5"), timedelta(minutes=1))
    assert budget.describe() == "5 tokens, cost 0.50, ask"
