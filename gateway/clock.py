"""The one clock a gateway app reads, injected by the app factory: the seam for time.

Every part that measures time reads the app's :class:`Clock` (the limiter's windows, the key
cache's ages, the canary judge's window and its events, the shared judge's cadence, the breakers
and the retry budget, the ledger's timestamps), so a test advances time instead of sleeping
through it::

    clock = ManualClock()
    app = create_app(config, clock=clock)
    clock.advance(61)                       # a minute's rate window has passed

``wall`` is seconds since the epoch (what is stored or shown: windows, expiry, ledger rows);
``monotonic`` measures intervals in the process (ages, deadlines). A request's own timings (time
to first byte, first token) are ``time.perf_counter()`` readings taken by the relay as bytes
move, and stay real.
"""

from __future__ import annotations

import time
from collections.abc import Callable

__all__ = ["SYSTEM_CLOCK", "Clock", "ManualClock", "Reading"]

Reading = Callable[[], float]
"""One of a clock's readings (``clock.wall``, ``clock.monotonic``, ``time.perf_counter``): what a
part that needs only one takes. :class:`Clock` is the app's pair; nothing else is named Clock."""


class Clock:
    """Two readings, ``wall()`` and ``monotonic()``; the system's by default.

    The readings are plain attributes, so the system clock costs what ``time.time()`` costs."""

    __slots__ = ("monotonic", "wall")

    def __init__(
        self,
        wall: Callable[[], float] = time.time,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self.wall = wall
        self.monotonic = monotonic


SYSTEM_CLOCK = Clock()


class ManualClock(Clock):
    """A clock that moves only when told: both readings advance together."""

    __slots__ = ("_offset", "_wall0")

    def __init__(self, wall: float = 1_800_000_000.0) -> None:
        self._wall0 = wall
        self._offset = 0.0
        super().__init__(self._wall, self._monotonic)

    def advance(self, seconds: float) -> None:
        if seconds < 0:
            raise ValueError("a clock does not go back")
        self._offset += seconds

    def _wall(self) -> float:
        return self._wall0 + self._offset

    def _monotonic(self) -> float:
        return 1000.0 + self._offset
