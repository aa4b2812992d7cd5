"""A circuit breaker per replica: passive health from the outcomes of real requests.

closed --(``failures`` in a row)--> open --(``open_seconds`` pass)--> half-open
half-open lets exactly one request through as a probe: success closes, failure reopens::

    breaker = CircuitBreaker(BreakerConfig(failures=3, open_seconds=5), clock=time.monotonic)
    if breaker.allows():
        ...  # send; then breaker.record(ok)
"""

from __future__ import annotations

from collections.abc import Callable
from enum import StrEnum

from gateway.routing.config import BreakerConfig


class BreakerState(StrEnum):
    CLOSED = "closed"
    OPEN = "open"
    HALF_OPEN = "half_open"


class CircuitBreaker:
    __slots__ = ("_clock", "_config", "_failures", "_opened_at", "_probing", "state")

    def __init__(self, config: BreakerConfig, clock: Callable[[], float]) -> None:
        self._config = config
        self._clock = clock
        self._failures = 0
        self._opened_at = 0.0
        self._probing = False
        self.state = BreakerState.CLOSED

    def allows(self) -> bool:
        """Whether a request may go to the replica now (without claiming the half-open probe)."""
        if self.state is BreakerState.CLOSED:
            return True
        if self.state is BreakerState.OPEN:
            return self._clock() - self._opened_at >= self._config.open_seconds
        return not self._probing

    def on_attempt(self) -> None:
        """A request was sent: in half-open (or open and due), it becomes the one probe."""
        if self.state is not BreakerState.CLOSED:
            self.state = BreakerState.HALF_OPEN
            self._probing = True

    def record(self, ok: bool) -> bool:
        """The outcome of a request; True when this changed whether the replica is in rotation."""
        if ok:
            self._failures = 0
            self._probing = False
            if self.state is BreakerState.CLOSED:
                return False
            self.state = BreakerState.CLOSED
            return True
        self._failures += 1
        if self.state is BreakerState.HALF_OPEN or self._failures >= self._config.failures:
            was_closed = self.state is BreakerState.CLOSED
            self._open()
            return was_closed
        return False

    def abandon(self) -> None:
        """A request ended with no verdict (the client left): free the half-open probe slot."""
        self._probing = False

    def trip(self) -> None:
        """Open at once (a connect error says the replica is not there at all)."""
        self._open()

    def _open(self) -> None:
        self.state = BreakerState.OPEN
        self._opened_at = self._clock()
        self._probing = False
