"""The in-process limiter backend: exact for one replica, the default.

Every check and update runs without an ``await`` in between, so on one event loop they are atomic
without a lock. With several workers or replicas each keeps its own counters: use Redis there.
"""

from __future__ import annotations

import time

from gateway.clock import Reading
from gateway.limits.maths import (
    SubjectState,
    budget_period,
    check,
    day_of,
    give_back,
    quotas,
    take,
)
from gateway.limits.types import AlertSink, Decision, Subject, Ticket, no_alerts


class MemoryLimiter:
    """``limiter = MemoryLimiter(clock=fake_clock)``; see :class:`LimiterBackend`."""

    def __init__(self, *, clock: Reading = time.time, on_alert: AlertSink = no_alerts) -> None:
        self._clock = clock
        self._states: dict[str, SubjectState] = {}
        self.on_alert = on_alert

    def _state(self, subject: Subject, now: float) -> SubjectState:
        state = self._states.get(subject.name)
        if state is None:
            state = self._states[subject.name] = SubjectState.fresh(now)
        state.refill(subject.limits, now)
        return state

    async def acquire(
        self, subjects: tuple[Subject, ...], tokens: int, request_id: str, money: int = 0
    ) -> Decision:
        now = self._clock()
        states = [self._state(s, now) for s in subjects]
        for subject, state in zip(subjects, states, strict=True):
            refusal = check(subject, state, tokens, now, money)
            if refusal is not None:
                requests, token_quota = quotas(subjects, states)
                return Decision(None, refusal, requests, token_quota)
        for subject, state in zip(subjects, states, strict=True):
            take(subject, state, tokens, money)
        requests, token_quota = quotas(subjects, states)
        periods = tuple(budget_period(s, st) for s, st in zip(subjects, states, strict=True))
        ticket = Ticket(subjects, tokens, request_id, day_of(now), money, periods)
        return Decision(ticket, None, requests, token_quota)

    def settle(self, ticket: Ticket, used_tokens: int, used_money: int = 0) -> None:
        now = self._clock()
        periods = ticket.periods or (-1,) * len(ticket.subjects)
        for subject, period in zip(ticket.subjects, periods, strict=True):
            state = self._states.get(subject.name)
            if state is None:
                state = self._states[subject.name] = SubjectState.fresh(now)
            money = (ticket.money, used_money, period)
            alerts = give_back(subject, state, ticket.tokens, used_tokens, ticket.day, now, money)
            for alert in alerts:  # refilled above
                self.on_alert(alert)

    async def budget_state(self, subject: Subject) -> tuple[int, int, int]:
        state = self._state(subject, self._clock())
        return state.money.period, state.money.committed, state.money.spent

    async def ping(self) -> bool:
        return True

    async def drain(self) -> None:
        return None

    async def aclose(self) -> None:
        return None
