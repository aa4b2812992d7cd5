"""The limiter maths, on an explicit clock (seconds since the epoch), shared by the in-process
backend and mirrored line for line by the Redis script (``redis_script.py``).

Why a token bucket and not a sliding window: a reservation is taken before the request and
settled to the real usage long after (a stream may run for minutes). A bucket settles by putting
the unused tokens back into one number, wherever the request started; a window would have to find
and rewrite the slot the reservation was charged to. The bucket of a per-minute limit L holds up to
L and refills continuously at L per minute, so over any span of t seconds it admits at most
L + L * t / 60: never more than the limit's burst plus its rate. A usage above the reservation
drives the level below zero: that debt delays the next requests instead of being forgiven.

The daily quota counts the tokens used on one UTC day, and its debt is not forgiven either. At the
day's turn only the part of the usage above the quota of each day passed carries over::

    day_used = max(0, day_used - daily * (today - day))

so a debt larger than one day's quota takes several days to pay off. A settlement on the day of
its reservation puts back (or charges) the difference ``used - reserved``; a settlement on a later
day (a request that straddled midnight) charges only its excess ``max(0, used - reserved)`` to
today's usage: the reservation was yesterday's, and a refund across the turn gives nothing back to
the new day. Tokens per minute need no such rule: the bucket keeps its debt as a negative level
and refills it at the limit's rate, whatever the day.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from gateway.bucket import Bucket
from gateway.limits.budgets import BudgetAlert, MoneyState, exceeds, period_reset, settle_money
from gateway.limits.config import LimitValues
from gateway.limits.types import Quota, Refusal, Subject

PERIOD = 60.0
DAY = 86400


def day_of(now: float) -> int:
    """The UTC day number, which names the daily quota's counter."""
    return int(now // DAY)


def carried(used: int, day: int, today: int, daily: int | None) -> int:
    """The usage of ``day`` that still counts on ``today``: what exceeded each past day's quota.

    A clock that went back (``today < day``) forgives nothing; without a daily limit nothing is
    counted against one, so nothing carries over.
    """
    if day == today:
        return used
    if daily is None:
        return 0
    return max(0, used - daily * max(0, today - day))


def _ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def wait_for(bucket: Bucket, amount: int, capacity: int) -> float:
    """Seconds until ``amount`` is available (the level is refilled to ``now``)."""
    return max(0.0, (amount - bucket.level) * PERIOD / capacity)


def quota(bucket: Bucket, capacity: int) -> Quota:
    remaining = max(0, math.floor(bucket.level))
    return Quota(capacity, remaining, (capacity - bucket.level) * PERIOD / capacity)


@dataclass(slots=True)
class SubjectState:
    """The counters of one key or tenant."""

    requests: Bucket
    tokens: Bucket
    in_flight: int = 0
    day: int = -1
    day_used: int = 0
    money: MoneyState = field(default_factory=MoneyState)

    @classmethod
    def fresh(cls, now: float) -> SubjectState:
        return cls(Bucket(math.inf, now), Bucket(math.inf, now))

    def refill(self, limits: LimitValues, now: float) -> None:
        if limits.requests_per_minute is not None:
            rpm = limits.requests_per_minute
            self.requests.refill(rpm, rpm, now, PERIOD)
        if limits.tokens_per_minute is not None:
            tpm = limits.tokens_per_minute
            self.tokens.refill(tpm, tpm, now, PERIOD)
        today = day_of(now)
        self.day_used = carried(self.day_used, self.day, today, limits.daily_tokens)
        self.day = today
        if limits.budget is not None:
            self.money.refill(limits.budget, now)


def check(
    subject: Subject, state: SubjectState, tokens: int, now: float, money: int = 0
) -> Refusal | None:
    """Whether one more request of ``tokens`` costing at most ``money`` fits every limit of
    ``subject`` (state refilled). The budget is checked first: when it refuses, no wait helps."""
    lim = subject.limits
    budget = lim.budget
    if budget is not None and exceeds(budget, state.money, money):
        resets = period_reset(budget.period, state.money.period)
        return Refusal(subject, "budget", budget.micros, state.money.committed, money, None, resets)
    rpm, tpm = lim.requests_per_minute, lim.tokens_per_minute
    if rpm is not None and state.requests.level < 1:
        used = rpm - max(0, math.floor(state.requests.level))
        return Refusal(
            subject, "requests per minute", rpm, used, 1, wait_for(state.requests, 1, rpm)
        )
    if tpm is not None and state.tokens.level < tokens:
        used = tpm - max(0, math.floor(state.tokens.level))
        later = wait_for(state.tokens, tokens, tpm) if tokens <= tpm else None
        return Refusal(subject, "tokens per minute", tpm, used, tokens, later)
    conc = lim.concurrent_requests
    if conc is not None and state.in_flight >= conc:
        return Refusal(subject, "concurrent requests", conc, state.in_flight, 1, 1.0)
    daily = lim.daily_tokens
    if daily is not None and state.day_used + tokens > daily:
        # The turn of the day that pays off the excess: several days away when a debt carries.
        days = _ceil_div(state.day_used + tokens - daily, daily)
        later = (state.day + days) * DAY - now if tokens <= daily else None
        return Refusal(subject, "tokens per day", daily, state.day_used, tokens, later)
    return None


def take(subject: Subject, state: SubjectState, tokens: int, money: int = 0) -> None:
    state.requests.level -= 1
    state.tokens.level -= tokens
    state.in_flight += 1
    state.day_used += tokens
    if subject.limits.budget is not None:
        state.money.committed += money


def budget_period(subject: Subject, state: SubjectState) -> int:
    """The period a reservation's money was taken in (-1: the subject has no budget)."""
    return -1 if subject.limits.budget is None else state.money.period


def give_back(
    subject: Subject,
    state: SubjectState,
    reserved: int,
    used: int,
    day: int,
    now: float,
    money: tuple[int, int, int] = (0, 0, -1),
) -> list[BudgetAlert]:
    """Settle one request: unused tokens return (a refund is ``used=0``), its slot frees, the
    budget keeps what it cost; returns the budget alerts this settlement crossed.

    ``day`` is the reservation's; settled on a later day, only the excess over the reservation
    is charged to today (see the module's docstring). ``money`` is (reserved, cost, the
    reservation's budget period), in micro-units, under the same rule.
    """
    state.refill(subject.limits, now)
    tpm = subject.limits.tokens_per_minute
    if tpm is not None:
        state.tokens.level = min(tpm, state.tokens.level + reserved - used)
    if subject.limits.daily_tokens is not None:
        if day < state.day:
            state.day_used += max(0, used - reserved)
        else:
            state.day_used = max(0, state.day_used + used - reserved)
    state.in_flight = max(0, state.in_flight - 1)
    budget = subject.limits.budget
    if budget is None:
        return []
    held, cost, period = money
    crossed = settle_money(budget, state.money, held, cost, period)
    resets = period_reset(budget.period, state.money.period)
    spent = state.money.spent
    return [
        BudgetAlert(subject.scope, subject.id, t, spent, budget.micros, budget.period, resets)
        for t in crossed
    ]


def tightest(current: Quota | None, candidate: Quota | None) -> Quota | None:
    """The quota with the fewest remaining, which is what the headers report."""
    if candidate is None:
        return current
    if current is None or candidate.remaining < current.remaining:
        return candidate
    return current


def quotas(
    subjects: tuple[Subject, ...], states: list[SubjectState]
) -> tuple[Quota | None, Quota | None]:
    """The requests and tokens quotas the response headers report: the tightest subject's."""
    requests: Quota | None = None
    tokens: Quota | None = None
    for subject, state in zip(subjects, states, strict=True):
        rpm, tpm = subject.limits.requests_per_minute, subject.limits.tokens_per_minute
        if rpm is not None:
            requests = tightest(requests, quota(state.requests, rpm))
        if tpm is not None:
            tokens = tightest(tokens, quota(state.tokens, tpm))
    return requests, tokens
