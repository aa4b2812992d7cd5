"""Prices: config validation, the one cost function and its rounding, costs on the ledger."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import pytest

from gateway.accounting.prices import (
    NO_PRICES,
    Price,
    PricesConfig,
    PriceTable,
    cost,
    format_money,
)
from gateway.config import ConfigError, parse_config

POOLS = {"pd": {"urls": ["http://127.0.0.1:8000/pd/"]}, "b": {"urls": ["http://127.0.0.1:8001/"]}}
MODELS = {
    "m": {"pool": "pd"},
    "v": {
        "variants": {
            "stable": {"weight": 9, "pools": {"pd": "pd"}},
            "canary": {"weight": 1, "pools": {"pd": "b"}},
        }
    },
}


def config(prices: dict[str, Any]) -> Any:
    return parse_config({"pools": POOLS, "models": MODELS, "prices": prices}, env={})


def test_prices_load_exactly_as_micro_units_per_million_tokens() -> None:
    cfg = config(
        {
            "currency": "USD",
            "models": {
                "m": {"input": "0.10", "cached_input": "0.025", "output": "0.40"},
                "v": {
                    "input": "1",
                    "output": "2",
                    "batch_discount": "0.5",
                    "variants": {"canary": {"input": "3", "output": "4"}},
                },
            },
        }
    )
    table = PriceTable.build(cfg.prices)
    m = table.price("m", None)
    assert m is not None and (m.input, m.cached_input, m.output) == (100_000, 25_000, 400_000)
    v = table.price("v", "stable")  # no own price: the model's
    assert v is not None and (v.input, v.cached_input, v.batch_discount_ppm) == (
        1_000_000,
        1_000_000,  # cached defaults to the input price
        500_000,
    )
    canary = table.price("v", "canary")
    assert canary is not None and canary.input == 3_000_000 and canary.version != v.version
    assert table.price("other", None) is None
    # The version is a function of the prices: every replica and restart names it the same.
    assert PriceTable.build(cfg.prices).price("m", None) == m
    assert m.version.startswith("USD-")


@pytest.mark.parametrize(
    ("prices", "message"),
    [
        ({"currency": "USD", "models": {"nope": {"input": "1", "output": "1"}}}, "no such model"),
        (
            {
                "currency": "USD",
                "models": {
                    "v": {
                        "input": "1",
                        "output": "1",
                        "variants": {"x": {"input": "1", "output": "1"}},
                    }
                },
            },
            "no such variant",
        ),
        ({"currency": "USD", "models": {"m": {"input": "-1", "output": "1"}}}, "negative"),
        ({"models": {"m": {"input": "1", "output": "1"}}}, "currency"),
        ({"currency": "dollars", "models": {}}, "ISO 4217"),
        ({"currency": "USD", "models": {"m": {"input": 0.1, "output": "1"}}}, "decimal string"),
        ({"currency": "USD", "models": {"m": {"input": "0.0000001", "output": "1"}}}, "finer"),
        ({"currency": "USD", "models": {"m": {"input": "NaN", "output": "1"}}}, "finite"),
        (
            {
                "currency": "USD",
                "models": {"m": {"input": "1", "output": "1", "batch_discount": "1"}},
            },
            "below 1",
        ),
        ({"currency": "USD", "models": {"m": {"input": "1"}}}, "output"),
    ],
)
def test_bad_prices_are_refused(prices: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        config(prices)


PRICE = Price(input=150_000, cached_input=75_000, output=600_000, batch_discount_ppm=0, version="t")


def test_cost_is_the_exact_product_rounded_half_up_once() -> None:
    # 1000 prompt tokens (400 cached) and 200 output: 600*0.15 + 400*0.075 + 200*0.6 per million
    # = 90,000,000 + 30,000,000 + 120,000,000 micro-units per million = 240 micro-units exactly.
    assert cost(PRICE, input_tokens=1000, cached_tokens=400, output_tokens=200) == 240
    # 1 token at 0.15/M is 0.15 micro-units: rounds to 0; 4 tokens 0.6 rounds to 1; 0.5 rounds up.
    assert cost(PRICE, input_tokens=1, cached_tokens=0, output_tokens=0) == 0
    assert cost(PRICE, input_tokens=4, cached_tokens=0, output_tokens=0) == 1
    half = Price(input=500_000, cached_input=0, output=0, batch_discount_ppm=0, version="h")
    assert cost(half, input_tokens=1, cached_tokens=0, output_tokens=0) == 1
    # Rounded once per request, not per token kind: 4 input (0.6) + 1 output (0.6) = 1.2 -> 1,
    # where rounding each kind would give 1 + 1 = 2.
    assert cost(PRICE, input_tokens=4, cached_tokens=0, output_tokens=1) == 1
    # Cached tokens beyond the prompt are not believed; negative counts are none.
    assert cost(PRICE, input_tokens=10, cached_tokens=99, output_tokens=-5) == cost(
        PRICE, input_tokens=10, cached_tokens=10, output_tokens=0
    )


def test_cached_tokens_cost_exactly_the_cached_price() -> None:
    fresh = cost(PRICE, input_tokens=1_000_000, cached_tokens=0, output_tokens=0)
    cached = cost(PRICE, input_tokens=1_000_000, cached_tokens=1_000_000, output_tokens=0)
    assert (fresh, cached) == (150_000, 75_000)


def test_batch_discount_applies_to_the_exact_product() -> None:
    discounted = Price(
        input=150_000, cached_input=75_000, output=600_000, batch_discount_ppm=500_000, version="b"
    )
    full = cost(discounted, input_tokens=3, cached_tokens=0, output_tokens=0)  # 0.45 -> 0
    assert full == 0
    assert cost(discounted, input_tokens=10, cached_tokens=0, output_tokens=0, batch=True) == 1
    assert (
        cost(discounted, input_tokens=2_000_000, cached_tokens=0, output_tokens=0, batch=True)
        == 150_000
    )


def test_money_formats_as_an_exact_decimal() -> None:
    assert format_money(1_234_567) == "1.234567"
    assert format_money(5) == "0.000005"
    assert format_money(-1_500_000) == "-1.500000"
    assert Decimal(format_money(987_654_321)) * 1_000_000 == 987_654_321


def test_no_prices_prices_nothing() -> None:
    assert NO_PRICES.price("m", None) is None
    assert PriceTable.build(PricesConfig()).currency is None


def test_overrides_replace_only_the_entries_they_name_in_the_one_currency() -> None:
    from gateway.accounting.prices import Price, PriceOverride, format_price

    config = PricesConfig.model_validate(
        {"currency": "USD", "models": {"m": {"input": "1", "output": "2",
                                             "variants": {"c": {"input": "3", "output": "4"}}}}}
    )  # fmt: skip
    table = PriceTable.build(config)
    mine = Price(1, 1, 1, 0, "USD-admin-1")
    euro = Price(2, 2, 2, 0, "EUR-admin-2")
    laid = table.overlaid(
        [
            PriceOverride("m", None, "USD", mine, 0.0, None),
            PriceOverride("n", None, "EUR", euro, 0.0, None),  # another currency: left out
        ]
    )
    assert laid.price("m", None) == mine
    assert laid.price("m", "c") == table.price("m", "c")  # the variant's own stays
    assert laid.price("n", None) is None and laid.currency == "USD"
    assert table.price("m", None) != mine  # the config's table is not changed
    assert [format_price(p) for p in (150_000, 0, 10_000_000, 1, 600_001)] == [
        "0.15", "0", "10", "0.000001", "0.600001"
    ]  # fmt: skip
