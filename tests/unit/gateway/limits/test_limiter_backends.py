"""The limiter maths on an injected clock, run against both backends (in-process and Redis)."""

from __future__ import annotations

import pytest

from gateway.limits.config import LimitValues
from gateway.limits.maths import DAY
from gateway.limits.types import Decision, LimiterBackend, Subject, Ticket
from tests.unit.gateway.limits.conftest import FakeClock


def key(**limits: int) -> Subject:
    return Subject("key", "k1", LimitValues(**limits))


def tenant(**limits: int) -> Subject:
    return Subject("tenant", "t1", LimitValues(**limits))


async def admit(limiter: LimiterBackend, *subjects: Subject, tokens: int = 0) -> Decision:
    return await limiter.acquire(subjects, tokens, f"r-{id(subjects)}-{tokens}")


def ticket_of(decision: Decision) -> Ticket:
    assert decision.ticket is not None, decision.refusal
    return decision.ticket


async def test_requests_per_minute_refuses_then_refills(
    limiter: LimiterBackend, clock: FakeClock
) -> None:
    k = key(requests_per_minute=3)
    for remaining in (2, 1, 0):
        decision = await admit(limiter, k)
        assert decision.requests is not None and decision.requests.remaining == remaining
    refused = await admit(limiter, k)
    assert refused.ticket is None and refused.refusal is not None
    assert refused.refusal.limit_name == "requests per minute"
    assert (refused.refusal.limit, refused.refusal.used) == (3, 3)
    assert refused.refusal.retry_after == pytest.approx(20.0)  # one request per 20 s
    clock.advance(19.9)
    assert (await admit(limiter, k)).ticket is None
    clock.advance(0.1)
    assert (await admit(limiter, k)).ticket is not None


async def test_refill_never_exceeds_the_limit(limiter: LimiterBackend, clock: FakeClock) -> None:
    k = key(requests_per_minute=2)
    await admit(limiter, k)
    clock.advance(3600)
    decision = await admit(limiter, k)
    assert decision.requests is not None
    assert decision.requests.remaining == 1
    assert decision.requests.reset == pytest.approx(30.0)


async def test_tokens_reserved_then_settled_to_real_usage(
    limiter: LimiterBackend, clock: FakeClock
) -> None:
    k = key(tokens_per_minute=1000)
    first = await admit(limiter, k, tokens=600)
    assert first.tokens is not None and first.tokens.remaining == 400
    refused = await admit(limiter, k, tokens=600)
    assert refused.refusal is not None and refused.refusal.limit_name == "tokens per minute"
    assert (refused.refusal.used, refused.refusal.requested) == (600, 600)
    assert refused.refusal.retry_after == pytest.approx(12.0)  # 200 missing at 1000/min
    limiter.settle(ticket_of(first), 100)
    await limiter.drain()
    second = await admit(limiter, k, tokens=600)
    assert second.tokens is not None and second.tokens.remaining == 300


async def test_refund_returns_the_whole_reservation(
    limiter: LimiterBackend, clock: FakeClock
) -> None:
    k = key(tokens_per_minute=1000)
    decision = await admit(limiter, k, tokens=1000)
    limiter.settle(ticket_of(decision), 0)
    await limiter.drain()
    again = await admit(limiter, k, tokens=1000)
    assert again.ticket is not None


async def test_usage_over_the_reservation_is_a_debt(
    limiter: LimiterBackend, clock: FakeClock
) -> None:
    k = key(tokens_per_minute=600)
    decision = await admit(limiter, k, tokens=100)
    limiter.settle(ticket_of(decision), 700)  # 600 more than reserved: level -100
    await limiter.drain()
    refused = await admit(limiter, k, tokens=50)
    assert refused.refusal is not None
    assert refused.refusal.retry_after == pytest.approx(15.0)  # 150 tokens at 10/s
    clock.advance(15)
    assert (await admit(limiter, k, tokens=50)).ticket is not None


async def test_request_larger_than_the_limit_cannot_wait(limiter: LimiterBackend) -> None:
    refused = await admit(limiter, key(tokens_per_minute=100), tokens=101)
    assert refused.refusal is not None and refused.refusal.retry_after is None


async def test_concurrency_slot_frees_on_settle(limiter: LimiterBackend) -> None:
    k = key(concurrent_requests=2)
    first = await admit(limiter, k)
    await admit(limiter, k)
    refused = await admit(limiter, k)
    assert refused.refusal is not None and refused.refusal.limit_name == "concurrent requests"
    limiter.settle(ticket_of(first), 0)
    await limiter.drain()
    assert (await admit(limiter, k)).ticket is not None


async def test_daily_quota_until_midnight_utc(limiter: LimiterBackend, clock: FakeClock) -> None:
    k = key(daily_tokens=1000)
    decision = await admit(limiter, k, tokens=700)
    limiter.settle(ticket_of(decision), 600)
    await limiter.drain()
    refused = await admit(limiter, k, tokens=500)
    assert refused.refusal is not None and refused.refusal.limit_name == "tokens per day"
    assert refused.refusal.used == 600
    midnight = (clock.now // DAY + 1) * DAY
    assert refused.refusal.retry_after == pytest.approx(midnight - clock.now)
    assert (await admit(limiter, k, tokens=400)).ticket is not None
    clock.now = midnight
    assert (await admit(limiter, k, tokens=1000)).ticket is not None


def midnight_after(now: float) -> float:
    return (now // DAY + 1) * DAY


async def test_daily_debt_carries_over_the_days_turn(
    limiter: LimiterBackend, clock: FakeClock
) -> None:
    k = key(daily_tokens=1000)
    decision = await admit(limiter, k, tokens=100)
    limiter.settle(ticket_of(decision), 2600)  # a stream that overran: 1600 over the quota
    await limiter.drain()
    clock.now = midnight_after(clock.now) + 60
    refused = await admit(limiter, k, tokens=500)
    assert refused.refusal is not None and refused.refusal.limit_name == "tokens per day"
    assert refused.refusal.used == 1600  # 2600 less the new day's 1000
    # 1600 + 500 fits only after two more turns: 600 + 500 is still over tomorrow.
    two_turns = midnight_after(clock.now) + DAY
    assert refused.refusal.retry_after == pytest.approx(two_turns - clock.now)
    clock.now = midnight_after(clock.now)
    assert (await admit(limiter, k, tokens=400)).ticket is not None  # 600 carried + 400
    refused = await admit(limiter, k, tokens=1)
    assert refused.refusal is not None and refused.refusal.used == 1000
    clock.now = midnight_after(clock.now)  # exactly the quota was used: nothing carries
    assert (await admit(limiter, k, tokens=1000)).ticket is not None


async def test_daily_debt_over_several_days_is_paid_by_each_day_passed(
    limiter: LimiterBackend, clock: FakeClock
) -> None:
    k = key(daily_tokens=1000)
    decision = await admit(limiter, k, tokens=100)
    limiter.settle(ticket_of(decision), 2600)
    await limiter.drain()
    clock.now = midnight_after(clock.now) + DAY + 60  # two turns without a request
    refused = await admit(limiter, k, tokens=401)
    assert refused.refusal is not None and refused.refusal.used == 600
    assert (await admit(limiter, k, tokens=400)).ticket is not None


async def test_settlement_after_midnight_charges_only_the_excess_to_the_new_day(
    limiter: LimiterBackend, clock: FakeClock
) -> None:
    k = key(daily_tokens=1000)
    clock.now = midnight_after(clock.now) - 10
    decision = await admit(limiter, k, tokens=300)
    clock.advance(20)  # the stream ends after midnight, 200 over its reservation
    limiter.settle(ticket_of(decision), 500)
    await limiter.drain()
    refused = await admit(limiter, k, tokens=801)
    assert refused.refusal is not None and refused.refusal.used == 200
    assert (await admit(limiter, k, tokens=800)).ticket is not None


async def test_refund_after_midnight_gives_nothing_back_to_the_new_day(
    limiter: LimiterBackend, clock: FakeClock
) -> None:
    k = key(daily_tokens=1000)
    clock.now = midnight_after(clock.now) - 10
    yesterday = await admit(limiter, k, tokens=600)
    clock.advance(20)
    assert (await admit(limiter, k, tokens=700)).ticket is not None
    limiter.settle(ticket_of(yesterday), 0)  # reserved 600 yesterday, used none
    await limiter.drain()
    refused = await admit(limiter, k, tokens=301)
    assert refused.refusal is not None and refused.refusal.used == 700


async def test_key_and_tenant_must_both_pass_and_nothing_is_taken_on_refusal(
    limiter: LimiterBackend,
) -> None:
    k, t = key(requests_per_minute=10), tenant(requests_per_minute=1)
    assert (await admit(limiter, k, t)).ticket is not None
    refused = await admit(limiter, k, t)
    assert refused.refusal is not None and refused.refusal.subject.scope == "tenant"
    # The refused request took nothing from the key: 9 left of 10, not 8.
    alone = await admit(limiter, k)
    assert alone.requests is not None and alone.requests.remaining == 8


async def test_headers_report_the_tightest_subject(limiter: LimiterBackend) -> None:
    decision = await admit(
        limiter, key(tokens_per_minute=5000), tenant(tokens_per_minute=2000), tokens=500
    )
    assert decision.tokens is not None
    assert (decision.tokens.limit, decision.tokens.remaining) == (2000, 1500)
    assert decision.tokens.reset == pytest.approx(15.0)
    assert decision.requests is None  # no requests limit: nothing to report


async def test_unlimited_subject_admits_everything(limiter: LimiterBackend) -> None:
    for _ in range(50):
        assert (await admit(limiter, key(), tokens=10**6)).ticket is not None


async def test_many_settlements_at_once_are_all_applied(limiter: LimiterBackend) -> None:
    k = key(tokens_per_minute=3000, concurrent_requests=300)
    tickets = [ticket_of(await limiter.acquire((k,), 10, f"r{i}")) for i in range(300)]
    assert (await admit(limiter, k, tokens=10)).ticket is None
    for ticket in tickets:  # more than one batch of the Redis backend's settler
        limiter.settle(ticket, 0)
    await limiter.drain()
    assert (await admit(limiter, k, tokens=3000)).ticket is not None
