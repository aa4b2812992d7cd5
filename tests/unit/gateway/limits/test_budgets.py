"""Budgets in money: the config, the UTC periods, and the reservation maths on both backends
(in-process and a real Redis), on the injected clock."""

from __future__ import annotations

import itertools
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from gateway.accounting.prices import MICROS as PRICE_MICROS
from gateway.auth.models import Limits, Principal
from gateway.errors import BudgetExhausted, LimiterUnavailable
from gateway.limits.admission import RateLimiter
from gateway.limits.budgets import (
    MICROS,
    Budget,
    BudgetAlert,
    iso,
    period_index,
    period_reset,
)
from gateway.limits.config import LimitsConfig, LimitValues
from gateway.limits.headers import refusal_error
from gateway.limits.memory import MemoryLimiter
from gateway.limits.redis_backend import RedisLimiter
from gateway.limits.types import Decision, LimiterBackend, Subject, Ticket
from gateway.metrics import GatewayMetrics
from tests.redisserver import RedisServer, socket_url
from tests.unit.gateway.limits.conftest import FakeClock

UNIT = MICROS  # one unit of the currency, in micro-units
_ids = itertools.count()


def budget(amount: str = "10", **fields: Any) -> Budget:
    return Budget.model_validate({"amount": amount, **fields})


def key(b: Budget | None = None, **limits: int) -> Subject:
    return Subject("key", "k1", LimitValues(budget=b, **limits))


def tenant(b: Budget | None = None, **limits: int) -> Subject:
    return Subject("tenant", "t1", LimitValues(budget=b, **limits))


async def admit(limiter: LimiterBackend, *subjects: Subject, money: int) -> Decision:
    return await limiter.acquire(subjects, 10, f"r{next(_ids)}", money)


def ticket_of(decision: Decision) -> Ticket:
    assert decision.ticket is not None, decision.refusal
    return decision.ticket


def collect(limiter: LimiterBackend) -> list[BudgetAlert]:
    alerts: list[BudgetAlert] = []
    limiter.on_alert = alerts.append
    return alerts


# -- the config -----------------------------------------------------------------------------


def test_an_amount_is_an_exact_decimal_in_micro_units() -> None:
    assert budget("200.00").micros == 200 * UNIT
    assert budget("0.000001").micros == 1
    assert budget(7).micros == 7 * UNIT  # type: ignore[arg-type]
    assert MICROS == PRICE_MICROS  # the budget's sub-unit is the one prices are kept in
    dumped = budget("1.50").model_dump(mode="json")
    assert dumped["amount"] == "1.50"  # kept as written: the key store's JSON round-trips it
    assert Budget.model_validate(dumped).micros == 1_500_000


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"amount": "-1"}, "0 or more"),
        ({"amount": 1.5}, "decimal string"),
        ({"amount": "ten"}, "decimal number"),
        ({"amount": "0.0000001"}, "finer than the sub-unit"),
        ({"amount": "1e10"}, "above"),
        ({"amount": "1", "currency": "usd"}, "ISO 4217"),
        ({"amount": "1", "period": "week"}, "period"),
        ({"amount": "1", "mode": "strict"}, "mode"),
        ({"amount": "1", "alert_thresholds": [0]}, "1 to 100"),
        ({"amount": "1", "alert_thresholds": list(range(1, 11))}, "at most 8"),
        ({"amount": "1", "limit": 3}, "limit"),
    ],
)
def test_a_bad_budget_is_a_clear_config_error(fields: dict[str, Any], message: str) -> None:
    with pytest.raises(ValidationError, match=message):
        Budget.model_validate(fields)


def test_the_currency_must_be_the_prices_one() -> None:
    assert budget(currency="USD").currency_error("USD") is None
    assert budget().currency_error("EUR") is None  # no currency written: the prices' one
    assert "not the prices' currency EUR" in (budget(currency="USD").currency_error("EUR") or "")
    assert "no prices" in (budget().currency_error(None) or "")


def test_thresholds_are_sorted_and_a_key_never_inherits_its_tenants_budget() -> None:
    assert budget(alert_thresholds=[100, 50, 50]).alert_thresholds == (50, 100)
    own = Limits(budget=budget("1"))
    assert Limits(requests_per_minute=3).over(own).budget is None
    assert Limits(budget=budget("2")).over(own).budget == budget("2")
    assert Limits().over(Limits(requests_per_minute=3)).requests_per_minute == 3
    with pytest.raises(ValidationError, match="per tenant or per key"):
        LimitsConfig.model_validate({"defaults": {"budget": {"amount": "1"}}})


# -- periods --------------------------------------------------------------------------------


def at(text: str) -> float:
    return datetime.fromisoformat(text).replace(tzinfo=UTC).timestamp()


def test_periods_turn_at_utc_midnight_and_the_first_of_the_month() -> None:
    before, after = at("2027-01-31T23:59:59.999"), at("2027-02-01T00:00:00")
    assert period_index("day", after) == period_index("day", before) + 1
    assert period_index("month", after) == period_index("month", before) + 1
    assert period_index("none", before) == period_index("none", after) == 0
    month = period_index("month", before)
    assert iso(period_reset("month", month)) == "2027-02-01T00:00:00Z"
    assert iso(period_reset("month", period_index("month", at("2027-12-15T12:00:00")))) == (
        "2028-01-01T00:00:00Z"
    )
    assert iso(period_reset("day", period_index("day", before))) == "2027-02-01T00:00:00Z"
    assert period_reset("none", 0) is None and iso(None) is None


# -- both backends --------------------------------------------------------------------------


async def test_a_hard_budget_refuses_only_when_less_than_the_reservation_remains(
    limiter: LimiterBackend,
) -> None:
    k = key(budget("10"))
    for _ in range(3):
        ticket_of(await admit(limiter, k, money=3 * UNIT))  # 9 of 10 committed
    refused = await admit(limiter, k, money=2 * UNIT)
    assert refused.ticket is None and refused.refusal is not None
    assert refused.refusal.limit_name == "budget"
    assert (refused.refusal.limit, refused.refusal.used, refused.refusal.requested) == (
        10 * UNIT,
        9 * UNIT,
        2 * UNIT,
    )
    ticket_of(await admit(limiter, k, money=UNIT))  # exactly what remains: admitted
    ticket_of(await admit(limiter, k, money=0))  # an unpriced model costs nothing


async def test_settlement_keeps_only_what_the_request_cost(limiter: LimiterBackend) -> None:
    k = key(budget("10"))
    first = ticket_of(await admit(limiter, k, money=6 * UNIT))
    assert (await admit(limiter, k, money=6 * UNIT)).ticket is None
    limiter.settle(first, 10, 2 * UNIT)  # it cost 2 of the 6 it reserved
    await limiter.drain()
    assert (await limiter.budget_state(k))[1:] == (2 * UNIT, 2 * UNIT)
    second = ticket_of(await admit(limiter, k, money=6 * UNIT))
    assert (await limiter.budget_state(k))[1:] == (8 * UNIT, 2 * UNIT)
    limiter.settle(second, 10, 0)  # a refund
    await limiter.drain()
    assert (await limiter.budget_state(k))[1:] == (2 * UNIT, 2 * UNIT)


async def test_a_key_budget_never_lifts_its_tenants(limiter: LimiterBackend) -> None:
    k, t = key(budget("100")), tenant(budget("5"))
    ticket_of(await admit(limiter, k, t, money=4 * UNIT))
    refused = await admit(limiter, k, t, money=2 * UNIT)
    assert refused.refusal is not None and refused.refusal.subject.scope == "tenant"
    small = key(budget("1"))
    refused = await admit(limiter, small, tenant(budget("100"), requests_per_minute=1000), money=2)
    assert refused.ticket is None  # and neither is taken: the tenant's budget is untouched
    other = Subject("tenant", "t2", LimitValues(budget=budget("100")))
    assert (await limiter.budget_state(other))[1] == 0


async def test_a_soft_budget_admits_past_its_amount_and_alerts_once(
    limiter: LimiterBackend,
) -> None:
    alerts = collect(limiter)
    k = key(budget("10", mode="soft"))
    for _ in range(4):
        limiter.settle(ticket_of(await admit(limiter, k, money=5 * UNIT)), 10, 4 * UNIT)
        await limiter.drain()
    assert [a.threshold for a in alerts] == [50, 80, 100]  # at 4, 8, 12 and 16 spent
    assert alerts[0].spent == 8 * UNIT and alerts[2].spent == 12 * UNIT
    assert alerts[0].scope == "key" and alerts[0].subject_id == "k1"


async def test_alerts_fire_once_per_period_and_the_period_turns_at_utc_midnight(
    limiter: LimiterBackend, clock: FakeClock
) -> None:
    alerts = collect(limiter)
    clock.now = at("2027-01-31T23:59:00")
    k = key(budget("10", period="day", alert_thresholds=[50]))
    limiter.settle(ticket_of(await admit(limiter, k, money=6 * UNIT)), 10, 6 * UNIT)
    await limiter.drain()
    assert (await admit(limiter, k, money=5 * UNIT)).ticket is None
    straddler = ticket_of(await admit(limiter, k, money=4 * UNIT))
    clock.now = at("2027-02-01T00:00:00")
    fresh = ticket_of(await admit(limiter, k, money=9 * UNIT))  # a new day, a new budget
    limiter.settle(straddler, 10, 5 * UNIT)  # reserved yesterday: only its excess counts today
    await limiter.drain()
    assert (await limiter.budget_state(k))[1:] == (10 * UNIT, UNIT)
    limiter.settle(fresh, 10, 5 * UNIT)
    await limiter.drain()
    assert (await limiter.budget_state(k))[1:] == (6 * UNIT, 6 * UNIT)
    assert [(a.threshold, a.resets_at) for a in alerts] == [
        (50, at("2027-02-01T00:00:00")),
        (50, at("2027-02-02T00:00:00")),
    ]


async def test_a_month_budget_turns_on_the_first_and_refuses_until_then(
    limiter: LimiterBackend, clock: FakeClock
) -> None:
    k = key(budget("1", period="month"))
    for now, admitted in [
        ("2028-02-29T23:59:59", True),
        ("2028-02-29T23:59:59", False),
        ("2028-03-01T00:00:00", True),
        ("2028-03-31T12:00:00", False),
        ("2028-04-01T00:00:01", True),
    ]:
        clock.now = at(now)
        decision = await admit(limiter, k, money=UNIT)
        assert (decision.ticket is not None) is admitted, now
    clock.now = at("2028-04-30T00:00:00")
    refused = await admit(limiter, k, money=UNIT)
    assert refused.refusal is not None and iso(refused.refusal.resets_at) == "2028-05-01T00:00:00Z"


async def test_a_budget_without_a_period_never_resets(
    limiter: LimiterBackend, clock: FakeClock
) -> None:
    k = key(budget("1", period="none"))
    ticket_of(await admit(limiter, k, money=UNIT))
    clock.advance(400 * 86400)
    refused = await admit(limiter, k, money=1)
    assert refused.refusal is not None and refused.refusal.resets_at is None


async def test_the_script_and_python_agree_on_the_month_across_centuries(
    redis_server: RedisServer, clock: FakeClock
) -> None:
    """The Lua civil-date arithmetic against Python's calendar, around many month ends."""
    backend = RedisLimiter(redis_server.url, prefix=f"months{next(_ids)}", clock=clock)
    try:
        k = key(budget("1", period="month"))
        for year, month in itertools.product((1999, 2000, 2024, 2100, 2400), range(1, 13)):
            start = datetime(year, month, 1, tzinfo=UTC).timestamp()
            for moment in (start - 0.5, start):
                clock.now = moment
                decision = await backend.acquire((k,), 1, f"m{next(_ids)}", 0)
                assert ticket_of(decision).periods == (period_index("month", clock.now),)
    finally:
        await backend.aclose()


async def test_two_replicas_on_one_redis_fire_each_threshold_once(
    redis_server: RedisServer, clock: FakeClock
) -> None:
    prefix = f"replicas{next(_ids)}"
    replicas = [RedisLimiter(redis_server.url, prefix=prefix, clock=clock) for _ in range(2)]
    alerts: list[BudgetAlert] = []
    for replica in replicas:
        replica.on_alert = alerts.append
    try:
        k = key(budget("10", mode="soft", alert_thresholds=[10, 20, 30, 40, 50, 60, 70, 80]))
        for i in range(40):
            replica = replicas[i % 2]
            replica.settle(ticket_of(await admit(replica, k, money=UNIT)), 1, UNIT // 4)
        for replica in replicas:
            await replica.drain()
        assert sorted(a.threshold for a in alerts) == [10, 20, 30, 40, 50, 60, 70, 80]
        assert (await replicas[0].budget_state(k))[2] == 10 * UNIT
    finally:
        for replica in replicas:
            await replica.aclose()


# -- the admission stage --------------------------------------------------------------------


def principal(key_budget: Budget | None, tenant_budget: Budget | None) -> Principal:
    tenant_limits = Limits(budget=tenant_budget)
    return Principal(
        key_id="k1",
        key_name="n",
        tenant_id="t1",
        allowed_models=None,
        limits=Limits(budget=key_budget).over(tenant_limits),
        tenant_limits=tenant_limits,
        labels={},
    )


async def test_the_refusal_is_insufficient_quota_naming_the_budget_and_its_reset() -> None:
    clock = FakeClock(at("2027-03-10T12:00:00"))
    stage = RateLimiter(LimitsConfig(), MemoryLimiter(clock=clock), _metrics())
    subjects = stage.subjects(principal(budget("1"), budget("5", period="day")))
    assert [s.scope for s in subjects] == ["key", "tenant"]
    await stage.admit("r1", subjects, 10, money=UNIT)
    with pytest.raises(BudgetExhausted) as refused:
        await stage.admit("r2", subjects, 10, money=1)
    err = refused.value
    assert (err.status, err.error_type, err.code) == (
        429,
        "insufficient_quota",
        "insufficient_quota",
    )
    assert err.headers["x-should-retry"] == "false" and "retry-after" not in err.headers
    assert "for key k1" in err.message and "resets at 2027-04-01T00:00:00Z" in err.message
    assert "Limit 1.000000, Committed 1.000000, Requested 0.000001" in err.message
    subjects = stage.subjects(principal(None, budget("1", period="none")))
    await stage.admit("r3", subjects, 10, money=UNIT)
    with pytest.raises(BudgetExhausted, match=r"tenant t1.*does not reset \(period none\)"):
        await stage.admit("r4", subjects, 10, money=1)


def test_the_refusal_error_says_no_reset_for_a_budget_that_has_none() -> None:
    from gateway.limits.types import Refusal

    refusal = Refusal(tenant(budget("1")), "budget", UNIT, UNIT, 5, None, None)
    assert "does not reset" in refusal_error(refusal).message


def _metrics() -> Any:
    from gateway.limits.metrics import LimitMetrics

    return LimitMetrics(GatewayMetrics())


async def test_a_hard_budget_fails_closed_and_a_soft_one_open_when_redis_is_away(
    tmp_path: Path,
) -> None:
    config = LimitsConfig(
        backend="redis", redis_url=socket_url(tmp_path), redis_timeout=0.2, on_backend_error="open"
    )
    stage = RateLimiter.build(config, GatewayMetrics())
    try:
        hard = stage.subjects(principal(budget("5"), None))
        with pytest.raises(LimiterUnavailable, match="hard budget"):
            await stage.admit("r1", hard, 10, money=UNIT)
        soft = stage.subjects(principal(budget("5", mode="soft"), None))
        assert (await stage.admit("r2", soft, 10, money=UNIT)).ticket is None  # open
        assert (await stage.admit("r3", hard, 10, money=0)).ticket is None  # costs nothing
    finally:
        await stage.aclose()


def test_amounts_in_decimal_are_never_floats() -> None:
    assert isinstance(budget("0.1").amount, Decimal) and budget("0.1").micros == 100_000
