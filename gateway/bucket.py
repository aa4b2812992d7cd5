"""The one token bucket: the limiter's windows, the retry budget and the unknown-key budget.

A level refilled at ``rate`` per ``period`` up to a cap, read and drawn at an explicit time (the
caller's clock), so that the same maths runs in the limiter, in Redis's script and in tests::

    bucket = Bucket(level=10, updated=clock())
    bucket.refill(rate=1.0, cap=10, now=clock())     # one token a second, at most ten
    if bucket.take():                                  # one token, if there is one
        ...
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["Bucket"]


@dataclass(slots=True)
class Bucket:
    level: float
    updated: float

    def refill(self, rate: float, cap: float, now: float, period: float = 1.0) -> None:
        """Add what ``rate`` per ``period`` gave since the last refill, up to ``cap``; a clock
        that went back adds nothing. The order of the arithmetic is the Redis script's."""
        if now > self.updated:
            self.level += (now - self.updated) * rate / period
            self.updated = now
        self.level = min(self.level, cap)

    def take(self, amount: float = 1.0) -> bool:
        """Draw ``amount`` if the level holds it."""
        if self.level < amount:
            return False
        self.level -= amount
        return True

    def give_back(self, amount: float, cap: float) -> None:
        self.level = min(cap, self.level + amount)
