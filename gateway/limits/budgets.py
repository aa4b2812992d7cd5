"""Budgets in money per tenant and per key: the config, the periods and the maths.

A budget sits in a tenant's or a key's ``limits`` (the key store's JSON) beside the token limits::

    limits:
      tokens_per_minute: 100000
      budget:
        amount: "200.00"        # a decimal string in the prices' currency (never a float)
        currency: USD           # optional; when given it must be prices.currency
        period: month           # day | month (UTC) | none (a total that never resets)
        mode: hard              # hard: refuse with 429 insufficient_quota; soft: alert only
        alert_thresholds: [50, 80, 100]   # percent of the amount spent; each fires once a period

Money is an integer of micro-units (``MICROS`` per unit, the sub-unit ``accounting.prices``
prices in), so the limiter's counters, the Redis script and the ledger's cost column add the same
integers. A budget is one more limit of a subject, held by the same backends and the same atomic
script as the token limits (``maths.py``, ``redis_script.py``): admission reserves the request's
maximum cost, settlement keeps what it cost.

Per subject the counters are: the period the figures belong to, ``committed`` (what settled
requests cost plus what admitted ones still hold reserved: what admission checks), ``spent``
(what settled requests cost: what alerts and the admin API report) and the highest alert
threshold already fired this period. At the turn of a period all four start again: a new month is
a new budget, and a debt (a request that cost more than it reserved) is not carried over. A
request reserved in one period and settled in the next charges only its excess over the
reservation to the new period, as the daily token quota does.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, datetime
from decimal import Decimal, InvalidOperation
from typing import Any, Literal

from pydantic import PrivateAttr, field_validator

from configkit import StrictModel
from gateway.values import value

MICROS = 1_000_000
"""Sub-units per unit of the currency: ``accounting.prices.MICROS`` (a test holds them equal)."""
MAX_AMOUNT = Decimal(1_000_000_000)
"""Units: 10^15 micro-units, exact in the Redis script's doubles (below 2^53) with room to add."""
DAY = 86400
MAX_THRESHOLDS = 8
"""Alert thresholds per budget: they become the ``threshold`` label, so they are few and 1-100."""

Period = Literal["day", "month", "none"]
PERIOD_CODES: dict[str, int] = {"none": 0, "day": 1, "month": 2}
"""How the Redis script is told a budget's period."""


class Budget(StrictModel):
    """One tenant's or key's budget, as written in its limits (see the module's docstring)."""

    amount: Decimal
    currency: str | None = None
    period: Period = "month"
    mode: Literal["hard", "soft"] = "hard"
    alert_thresholds: tuple[int, ...] = (50, 80, 100)
    _micros: int = PrivateAttr(0)

    @field_validator("amount", mode="before")
    @classmethod
    def _amount(cls, raw: Any) -> Decimal:
        # A YAML or JSON float has already lost its exact value when it arrives: refused.
        if isinstance(raw, bool) or not isinstance(raw, (str, int, Decimal)):
            raise ValueError(f"amount must be a decimal string such as '200.00', got {raw!r}")
        try:
            number = Decimal(str(raw).strip())
        except InvalidOperation:
            raise ValueError(f"amount must be a decimal number, got {str(raw)[:40]!r}") from None
        if not number.is_finite() or number < 0:
            raise ValueError(f"amount must be a finite number, 0 or more, got {str(raw)[:40]}")
        if number > MAX_AMOUNT:
            raise ValueError(f"amount above {MAX_AMOUNT} is refused")
        if number * MICROS != (number * MICROS).to_integral_value():
            raise ValueError(f"amount {number} is finer than the sub-unit (6 decimal places)")
        return number

    @field_validator("currency")
    @classmethod
    def _currency(cls, code: str | None) -> str | None:
        if code is not None and not re.fullmatch(r"[A-Z]{3}", code):
            raise ValueError(f"currency must be an ISO 4217 code such as USD, got {code[:40]!r}")
        return code

    @field_validator("alert_thresholds")
    @classmethod
    def _thresholds(cls, thresholds: tuple[int, ...]) -> tuple[int, ...]:
        if len(thresholds) > MAX_THRESHOLDS:
            raise ValueError(f"at most {MAX_THRESHOLDS} alert thresholds")
        if any(not 1 <= t <= 100 for t in thresholds):
            raise ValueError("alert thresholds are percentages from 1 to 100")
        return tuple(sorted(set(thresholds)))

    def model_post_init(self, context: Any, /) -> None:
        self._micros = int(self.amount * MICROS)  # exact: the validator refused finer amounts

    @property
    def micros(self) -> int:
        """The amount in micro-units."""
        return self._micros

    @property
    def hard(self) -> bool:
        return self.mode == "hard"

    def currency_error(self, currency: str | None) -> str | None:
        """Why this budget cannot be kept in the prices' ``currency``, or None."""
        if currency is None:
            return "budget: no prices are configured (prices.currency), so nothing has a cost"
        if self.currency is not None and self.currency != currency:
            return f"budget.currency: {self.currency} is not the prices' currency {currency}"
        return None


def period_index(period: str, now: float) -> int:
    """The number of the UTC period ``now`` falls in: days or months since 1970, 0 for none."""
    if period == "day":
        return int(now // DAY)
    if period == "month":
        moment = datetime.fromtimestamp(now, UTC)
        return (moment.year - 1970) * 12 + moment.month - 1
    return 0


def period_reset(period: str, index: int) -> float | None:
    """When period ``index`` ends (seconds since the epoch); None for a budget that never resets."""
    if period == "day":
        return float((index + 1) * DAY)
    if period == "month":
        year, month = divmod(index + 1, 12)
        return datetime(1970 + year, month + 1, 1, tzinfo=UTC).timestamp()
    return None


def iso(moment: float | None) -> str | None:
    """A reset time as clients read it: ``2027-02-01T00:00:00Z``."""
    if moment is None:
        return None
    return datetime.fromtimestamp(moment, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass(slots=True)
class MoneyState:
    """One subject's budget counters (see the module's docstring)."""

    period: int = -1
    committed: int = 0
    spent: int = 0
    fired: int = 0
    """The highest alert threshold fired this period (0: none)."""

    def refill(self, budget: Budget, now: float) -> None:
        """Start the counters again when ``now`` is in a later period than they count."""
        current = period_index(budget.period, now)
        if current != self.period:
            self.period, self.committed, self.spent, self.fired = current, 0, 0, 0


@value
class BudgetAlert:
    """A threshold crossed: decided once per period per budget, by whichever replica settled."""

    scope: str
    subject_id: str
    threshold: int
    spent: int
    amount: int
    period: str
    resets_at: float | None


def exceeds(budget: Budget, state: MoneyState, money: int) -> bool:
    """Whether a hard budget refuses a reservation of ``money`` (state refilled). A request that
    costs nothing (an unpriced model) is never refused by a budget."""
    return budget.hard and money > 0 and state.committed + money > budget.micros


def settle_money(
    budget: Budget, state: MoneyState, reserved: int, used: int, period: int
) -> list[int]:
    """Keep what the request cost; return the thresholds this settlement crossed (state
    refilled). ``period`` is the reservation's: settled in a later one, only the excess over
    the reservation is charged, as the daily token quota does."""
    if period == state.period:
        state.committed = max(0, state.committed + used - reserved)
        state.spent += used
    else:
        excess = max(0, used - reserved)
        state.committed += excess
        state.spent += excess
    return crossed(budget, state)


def crossed(budget: Budget, state: MoneyState) -> list[int]:
    """The thresholds not yet fired that ``spent`` has reached, lowest first; marks them fired."""
    fired: list[int] = []
    if state.spent <= 0:  # nothing spent crosses nothing, not even on a budget of 0
        return fired
    for threshold in budget.alert_thresholds:
        if threshold > state.fired and state.spent * 100 >= threshold * budget.micros:
            fired.append(threshold)
            state.fired = threshold
    return fired
