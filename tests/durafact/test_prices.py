"""What a call costs: cached input at the cached price, the rest at the input price,
output at the output price, in decimals; an unlisted model costs None, never 0; and a
run's usage adds up without turning an unknown cost into a known one."""

from __future__ import annotations

from decimal import Decimal

from durafact._core.llm import Usage
from durafact._core.prices import ModelPrice, Prices

PRICES = Prices(
    currency="USD",
    models={
        "gpt-4o-mini": ModelPrice(input=Decimal("0.15"), cached_input=Decimal("0.075"), output=6),
        "plain": ModelPrice(input=Decimal("1.10"), output=Decimal("4.40")),
    },
)
CALL = Usage(prompt_tokens=1000, completion_tokens=200, total_tokens=1200, cached_tokens=800)


def test_cached_input_costs_the_cached_price_and_the_rest_of_the_input_the_input_price() -> None:
    priced = PRICES.priced(CALL, answered="gpt-4o-mini", asked="gpt-4o-mini")
    # 800 x 0.075 + 200 x 0.15 + 200 x 6, per million: exact, not a binary float.
    assert priced.cost == Decimal("0.00129")
    assert priced.currency == "USD"
    assert (priced.prompt_tokens, priced.cached_tokens, priced.total_tokens) == (1000, 800, 1200)


def test_without_a_cached_price_cached_input_costs_the_input_price() -> None:
    priced = PRICES.priced(CALL, answered="plain", asked="plain")
    assert priced.cost == (1000 * Decimal("1.10") + 200 * Decimal("4.40")) / 1_000_000


def test_the_answering_models_price_wins_and_the_asked_for_one_stands_in_for_a_dated_name() -> None:
    dated = PRICES.priced(CALL, answered="gpt-4o-mini-2024-07-18", asked="gpt-4o-mini")
    assert dated.cost == Decimal("0.00129")
    rerouted = PRICES.priced(CALL, answered="plain", asked="gpt-4o-mini")
    assert rerouted.cost == PRICES.priced(CALL, answered="plain", asked="plain").cost


def test_a_model_the_table_does_not_list_costs_none_never_zero() -> None:
    priced = PRICES.priced(CALL, answered="llama-3-70b", asked="llama-3-70b")
    assert priced.cost is None
    assert priced.total_tokens == 1200


def test_an_unknown_cost_stays_unknown_in_a_sum_and_known_ones_add_exactly() -> None:
    known = PRICES.priced(CALL, answered="gpt-4o-mini", asked="gpt-4o-mini")
    unknown = PRICES.priced(CALL, answered="other", asked="other")
    total = Usage() + known + known
    assert total.cost == Decimal("0.00258") and total.currency == "USD"
    assert total.cached_tokens == 1600
    assert (total + unknown).cost is None
    assert (unknown + total).total_tokens == 3600


def test_costs_in_two_currencies_have_no_sum() -> None:
    euros = Prices(currency="EUR", models={"m": ModelPrice(input=1, output=1)})
    dollars = Prices(currency="USD", models={"m": ModelPrice(input=1, output=1)})
    both = euros.priced(CALL, "m", "m") + dollars.priced(CALL, "m", "m")
    assert both.cost is None and both.currency == ""


def test_a_calls_usage_stores_only_what_is_not_zero() -> None:
    assert Usage().model_dump() == {}
    unpriced = Usage(prompt_tokens=3, total_tokens=3, cost=None)
    assert unpriced.model_dump(mode="json") == {
        "prompt_tokens": 3,
        "total_tokens": 3,
        "cost": None,
    }
    priced = PRICES.priced(CALL, "plain", "plain")
    assert Usage.model_validate_json(priced.model_dump_json()) == priced
