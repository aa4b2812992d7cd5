"""The in-process limiter backend: exact for one replica, the default.

Every check and update runs without an ``await`` in between, so on one event loop they are atomic
without a lock. With several workers or replicas each keeps its own counters: use Redis there.
"""

from __future__ import annotations

import time

from gateway.clock import Reading
from gateway.limits.maths import SubjectState, check, day_of, give_back, quotas, take
from gateway.limits.types import Decision, Subject, Ticket


class MemoryLimiter:
    """``limiter = MemoryLimiter(clock=fake_clock)``; see :class:`LimiterBackend`."""

    def __init__(self, *, clock: Reading = time.time) -> None:
        self._clock = clock
        self._states: dict[str, SubjectState] = {}

    def _state(self, subject: Subject, now: float) -> SubjectState:
        state = self._states.get(subject.name)
        if state is None:
            state = self._states[subject.name] = SubjectState.fresh(now)
        state.refill(subject.limits, now)
        return state

    async def acquire(
        self, subjects: tuple[Subject, ...], tokens: int, request_id: str
    ) -> Decision:
        now = self._clock()
        states = [self._state(s, now) for s in subjects]
        for subject, state in zip(subjects, states, strict=True):
            refusal = check(subject, state, tokens, now)
            if refusal is not None:
                requests, token_quota = quotas(subjects, states)
                return Decision(None, refusal, requests, token_quota)
        for state in states:
            take(state, tokens)
        requests, token_quota = quotas(subjects, states)
        return Decision(
            Ticket(subjects, tokens, request_id, day_of(now)), None, requests, token_quota
        )

    def settle(self, ticket: Ticket, used_tokens: int) -> None:
        now = self._clock()
        for subject in ticket.subjects:
            state = self._states.get(subject.name)
            if state is None:
                state = self._states[subject.name] = SubjectState.fresh(now)
            give_back(subject, state, ticket.tokens, used_tokens, ticket.day, now)  # refills

    async def ping(self) -> bool:
        return True

    async def drain(self) -> None:
        return None

    async def aclose(self) -> None:
        return None
