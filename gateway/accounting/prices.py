"""Prices per model (and per variant), and the one function that turns tokens into money.

Money is an integer of micro-units of the configured currency (1 USD = 1,000,000): no float is
ever on the path. Prices are written in the config as decimal strings per million tokens
(``"0.15"``), parsed exactly (``Decimal``) at load and kept as integers of micro-units per million
tokens; a price finer than that is refused rather than rounded::

    prices:
      currency: USD
      models:
        llama-8b:
          input: "0.10"            # per million prompt tokens not served from the cache
          cached_input: "0.025"    # per million cached prompt tokens (default: input)
          output: "0.40"
          batch_discount: "0.5"    # optional: the fraction off for batch work
          variants:
            canary: {input: "0.12", output: "0.48"}

:func:`cost` is the only place cost is computed, with the rounding rule stated once: the exact
product of a request's tokens and its prices, rounded half up to the micro-unit, once per request.
It is a pure function of integers, so a budget can price a reservation's maximum (the prompt at
the input price, ``max_tokens`` at the output price) with it and settle the real cost the same way.

The config's prices are the default; prices set through the admin API (stored in the gateway's
database, gateway/accounting/price_store.py) are laid over them entry by entry
(:meth:`PriceTable.overlaid`), each with a version of its own.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable, Mapping
from decimal import Decimal, InvalidOperation
from typing import Any

from pydantic import Field, field_validator, model_validator

from configkit import StrictModel
from gateway.values import value

MICROS = 1_000_000
"""Sub-units (micro-units) per unit of the currency."""
TOKENS_PER_PRICE = 1_000_000
"""Prices are per million tokens."""
_PPM = 1_000_000
_MAX_PRICE = Decimal(1_000_000)
"""Per million tokens: far above any real price, low enough that no product can overflow a
PostgreSQL BIGINT for any request the gateway admits."""


def _exact(raw: Any, what: str) -> Decimal:
    """A decimal string (or an integer) as an exact ``Decimal``; a YAML float is refused, because
    ``0.1`` written bare has already lost its exact value when the YAML parser hands it over."""
    if isinstance(raw, bool) or not isinstance(raw, (str, int)):
        raise ValueError(f"{what} must be a decimal string such as '0.15', got {raw!r}")
    try:
        number = Decimal(str(raw).strip())
    except InvalidOperation:
        raise ValueError(f"{what} must be a decimal number, got {str(raw)[:40]!r}") from None
    if not number.is_finite():
        raise ValueError(f"{what} must be finite, got {raw!r}")
    return number


def _micros(number: Decimal, what: str) -> int:
    """``number`` currency units as an exact count of micro-units, or ValueError."""
    scaled = number * MICROS
    if scaled != scaled.to_integral_value():
        raise ValueError(f"{what}: {number} is finer than the sub-unit (6 decimal places)")
    return int(scaled)


class TokenPrices(StrictModel):
    """Prices per million tokens, in units of ``prices.currency``, as decimal strings."""

    input: Decimal
    cached_input: Decimal | None = None
    """Prompt tokens the upstream served from its prefix cache (default: ``input``)."""
    output: Decimal
    batch_discount: Decimal = Decimal(0)
    """The fraction taken off for batch work (0 to below 1)."""

    @field_validator("input", "cached_input", "output", mode="before")
    @classmethod
    def _price(cls, raw: Any) -> Decimal | None:
        if raw is None:
            return None
        number = _exact(raw, "a price")
        if number < 0:
            raise ValueError(f"a price cannot be negative, got {number}")
        if number > _MAX_PRICE:
            raise ValueError(f"a price above {_MAX_PRICE} per million tokens is refused")
        _micros(number, "a price")
        return number

    @field_validator("batch_discount", mode="before")
    @classmethod
    def _discount(cls, raw: Any) -> Decimal:
        number = _exact(raw, "batch_discount")
        if not 0 <= number < 1:
            raise ValueError(f"batch_discount must be at least 0 and below 1, got {number}")
        _micros(number, "batch_discount")
        return number


def currency_code(code: str) -> str:
    """``code`` if it is an ISO 4217 code (three capitals), else ValueError."""
    if not re.fullmatch(r"[A-Z]{3}", code):
        raise ValueError(f"currency must be an ISO 4217 code such as USD, got {code[:40]!r}")
    return code


class PriceSpec(TokenPrices):
    """One entry's prices as the admin API and CLI take them: the config's fields, and the
    currency, which is required (``{"currency": "USD", "input": "0.10", "output": "0.40"}``)."""

    currency: str

    @field_validator("currency")
    @classmethod
    def _code(cls, code: str) -> str:
        return currency_code(code)


class ModelPrices(TokenPrices):
    variants: dict[str, TokenPrices] = Field(default_factory=dict)
    """A variant's own prices (a canary on another deployment); others use the model's."""


class PricesConfig(StrictModel):
    """The ``prices`` section (reloaded with the routing sections)."""

    currency: str | None = None
    """ISO 4217 code (``USD``, ``EUR``): required once any model has a price."""
    models: dict[str, ModelPrices] = Field(default_factory=dict)
    """Models without an entry are not priced: their rows carry no cost."""

    @field_validator("currency")
    @classmethod
    def _code(cls, code: str | None) -> str | None:
        return None if code is None else currency_code(code)

    @model_validator(mode="after")
    def _currency_given(self) -> PricesConfig:
        if self.models and self.currency is None:
            raise ValueError("currency: required when models have prices")
        return self


def price_errors(prices: PricesConfig, models: Mapping[str, set[str]]) -> list[str]:
    """What in ``prices`` names no configured model or variant (``models``: name -> variants)."""
    problems = []
    for name, entry in prices.models.items():
        if name not in models:
            problems.append(f"prices.models.{name}: no such model in models")
            continue
        problems += [
            f"prices.models.{name}.variants.{variant}: model {name} has no such variant"
            for variant in entry.variants
            if variant not in models[name]
        ]
    return problems


@value
class Price:
    """One price, in micro-units per million tokens; ``version`` names it on the ledger rows."""

    input: int
    cached_input: int
    output: int
    batch_discount_ppm: int
    version: str


def price_parts(entry: TokenPrices) -> tuple[int, int, int, int]:
    """``entry`` in micro-units per million tokens (input, cached input, output), and its batch
    discount in parts per million: what a :class:`Price` holds, and the store keeps."""
    cached = entry.input if entry.cached_input is None else entry.cached_input
    return (
        _micros(entry.input, "input"),
        _micros(cached, "cached_input"),
        _micros(entry.output, "output"),
        _micros(entry.batch_discount, "batch_discount"),
    )


def _price(currency: str, entry: TokenPrices) -> Price:
    parts = price_parts(entry)
    # The same prices give the same version on every replica and after every restart or reload.
    digest = hashlib.sha256(f"{currency}:{parts}".encode()).hexdigest()[:12]
    return Price(*parts, version=f"{currency}-{digest}")


@value
class PriceOverride:
    """A price set through the admin API for a model (``variant`` None) or one of its variants;
    its ``price.version`` names the change that set it (``USD-admin-7``)."""

    model: str
    variant: str | None
    currency: str
    price: Price
    set_at: float
    set_by: str | None


@value
class PriceTable:
    currency: str | None
    models: Mapping[tuple[str, str | None], Price]
    """(model, variant) -> price; (model, None) is the model's own."""

    @classmethod
    def build(cls, config: PricesConfig) -> PriceTable:
        table: dict[tuple[str, str | None], Price] = {}
        for name, entry in config.models.items():
            assert config.currency is not None  # checked by PricesConfig
            table[name, None] = _price(config.currency, entry)
            for variant, own in entry.variants.items():
                table[name, variant] = _price(config.currency, own)
        return cls(config.currency, table)

    def overlaid(self, overrides: Iterable[PriceOverride]) -> PriceTable:
        """This table with each override in place of the entry it names (the others kept: a
        model's override leaves its variants' own config prices in force). One table has one
        currency: an override in another is left out (the API refuses to set one)."""
        currency = self.currency
        table = dict(self.models)
        for override in overrides:
            currency = currency or override.currency
            if override.currency == currency:
                table[override.model, override.variant] = override.price
        return PriceTable(currency, table)

    def price(self, model: str, variant: str | None) -> Price | None:
        """The variant's price, else the model's, else None (not priced)."""
        found = self.models.get((model, variant)) if variant is not None else None
        return found or self.models.get((model, None))

    def highest(self, model: str) -> Price | None:
        """The dearest of the model's prices, kind by kind (over its variants): what a budget
        reserves at admission, before routing has picked the variant that is then settled."""
        prices = [p for (name, _), p in self.models.items() if name == model]
        if not prices:
            return None
        return Price(
            input=max(p.input for p in prices),
            cached_input=max(p.cached_input for p in prices),
            output=max(p.output for p in prices),
            batch_discount_ppm=min(p.batch_discount_ppm for p in prices),
            version="highest",
        )


NO_PRICES = PriceTable(None, {})


def cost(
    price: Price,
    *,
    input_tokens: int,
    cached_tokens: int,
    output_tokens: int,
    batch: bool = False,
) -> int:
    """What the tokens cost at ``price``, in micro-units: the exact product, rounded half up to
    the micro-unit, once (never per token kind). ``input_tokens`` includes the cached ones (as
    OpenAI's ``prompt_tokens`` does); cached tokens beyond the prompt are not believed."""
    cached = min(max(cached_tokens, 0), max(input_tokens, 0))
    uncached = max(input_tokens, 0) - cached
    numerator = (
        uncached * price.input + cached * price.cached_input + max(output_tokens, 0) * price.output
    )
    denominator = TOKENS_PER_PRICE
    if batch:
        numerator *= _PPM - price.batch_discount_ppm
        denominator *= _PPM
    return (2 * numerator + denominator) // (2 * denominator)


def format_price(micros_per_million: int) -> str:
    """A price in micro-units as the shortest exact decimal string (``150000`` -> ``0.15``),
    the form the config and the API take it in."""
    return format(Decimal(micros_per_million).scaleb(-6).normalize(), "f")


def format_money(micros: int) -> str:
    """Micro-units as an exact decimal string of currency units (``1234567`` -> ``1.234567``)."""
    sign = "-" if micros < 0 else ""
    units, rest = divmod(abs(micros), MICROS)
    return f"{sign}{units}.{rest:06d}"
