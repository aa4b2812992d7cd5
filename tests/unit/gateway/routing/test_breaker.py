"""The per-replica circuit breaker, on an injected clock."""

from __future__ import annotations

from gateway.routing.breaker import BreakerState, CircuitBreaker
from gateway.routing.config import BreakerConfig


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def make(failures: int = 3, open_seconds: float = 5.0) -> tuple[CircuitBreaker, Clock]:
    clock = Clock()
    return CircuitBreaker(BreakerConfig(failures=failures, open_seconds=open_seconds), clock), clock


def test_opens_after_consecutive_failures_only() -> None:
    breaker, _ = make(failures=3)
    breaker.record(False)
    breaker.record(False)
    breaker.record(True)  # a success resets the count
    breaker.record(False)
    breaker.record(False)
    assert breaker.state is BreakerState.CLOSED and breaker.allows()
    assert breaker.record(False) is True  # the third in a row: changed rotation
    assert breaker.state is BreakerState.OPEN and not breaker.allows()


def test_half_open_lets_one_probe_through_and_success_closes() -> None:
    breaker, clock = make(failures=1, open_seconds=5)
    breaker.record(False)
    clock.now += 4.9
    assert not breaker.allows()
    clock.now += 0.2
    assert breaker.allows()
    breaker.on_attempt()  # the probe
    assert breaker.state is BreakerState.HALF_OPEN
    assert not breaker.allows()  # only one probe at a time
    assert breaker.record(True) is True
    assert breaker.state is BreakerState.CLOSED and breaker.allows()


def test_failed_probe_reopens_for_a_full_period() -> None:
    breaker, clock = make(failures=2, open_seconds=5)
    breaker.trip()
    clock.now += 5
    breaker.on_attempt()
    breaker.record(False)  # one failure is enough in half-open
    assert breaker.state is BreakerState.OPEN
    clock.now += 4
    assert not breaker.allows()
    clock.now += 1
    assert breaker.allows()


def test_abandoned_probe_frees_the_slot() -> None:
    breaker, clock = make(failures=1, open_seconds=1)
    breaker.trip()
    clock.now += 1
    breaker.on_attempt()
    assert not breaker.allows()
    breaker.abandon()  # the client left before the probe had a verdict
    assert breaker.allows()
