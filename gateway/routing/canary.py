"""Canary splits: sticky weighted choice of a variant, and the sliding window that judges it.

The choice is weighted rendezvous hashing: every variant scores ``weight / -ln(u)`` with ``u`` a
hash of (key, variant) in (0, 1), and the highest score wins. A key keeps its variant while the
weights stay; changing one variant's weight only moves keys into or out of that variant (raising
the canary from 5 to 10 moves stable keys to the canary and never the other way), and each variant
gets its weight's share of keys::

    choose_variant(b"key-123", [("stable", 95.0), ("canary", 5.0)])  # "stable" or "canary"
"""

from __future__ import annotations

import hashlib
import math
from collections import deque
from collections.abc import Iterable, Sequence

from gateway.routing.config import CanaryConfig
from gateway.values import value

_HASH_SPAN = float(1 << 64)


def choose_variant(key: bytes, weighted: Sequence[tuple[str, float]]) -> str | None:
    """The variant ``key`` sticks to; None when every weight is zero."""
    best: str | None = None
    best_score = 0.0
    for name, weight in weighted:
        if weight <= 0:
            continue
        digest = hashlib.blake2b(key + b"\x00" + name.encode(), digest_size=8).digest()
        u = (int.from_bytes(digest, "big") + 0.5) / _HASH_SPAN  # strictly inside (0, 1)
        score = weight / -math.log(u)
        if score > best_score:
            best, best_score = name, score
    return best


@value
class WindowSummary:
    requests: int
    error_rate: float
    ttft_p95: float | None
    """Seconds; None when no request in the window produced a first byte."""


class SlidingWindow:
    """Outcomes of the last ``seconds`` seconds: request count, errors, times to first token.

    Events are appended in time order and dropped from the left as they age, so adding is O(1)
    and the memory is bounded by the request rate times the window.
    """

    __slots__ = ("_events", "_seconds")

    def __init__(self, seconds: float) -> None:
        self._seconds = seconds
        self._events: deque[tuple[float, bool, float | None]] = deque()

    def add(self, now: float, error: bool, ttft: float | None) -> None:
        self._events.append((now, error, ttft))
        self._expire(now)

    def summary(self, now: float) -> WindowSummary:
        self._expire(now)
        return summarise((error, ttft) for _, error, ttft in self._events)

    def clear(self) -> None:
        self._events.clear()

    def _expire(self, now: float) -> None:
        horizon = now - self._seconds
        events = self._events
        while events and events[0][0] < horizon:
            events.popleft()


def summarise(samples: Iterable[tuple[bool, float | None]]) -> WindowSummary:
    """Request count, error rate and p95 TTFT of ``(error, ttft)`` samples: the one summary, for
    this process's window and for the deployment's shared one alike."""
    count = errors = 0
    ttfts: list[float] = []
    for error, ttft in samples:
        count += 1
        errors += error
        if ttft is not None:
            ttfts.append(ttft)
    if not count:
        return WindowSummary(0, 0.0, None)
    ttfts.sort()
    p95 = ttfts[min(len(ttfts) - 1, math.ceil(0.95 * len(ttfts)) - 1)] if ttfts else None
    return WindowSummary(count, errors / count, p95)


def verdict(candidate: WindowSummary, baseline: WindowSummary, config: CanaryConfig) -> str | None:
    """:func:`rollback_reason` with a model's canary config."""
    return rollback_reason(
        candidate,
        baseline,
        min_requests=config.min_requests,
        error_rate_margin=config.error_rate_margin,
        ttft_p95_margin=config.ttft_p95_margin,
        ttft_p95_min_delta=config.ttft_p95_min_delta_seconds,
        error_rate_ceiling=config.error_rate_ceiling,
        ttft_p95_ceiling=config.ttft_p95_ceiling_seconds,
    )


def rollback_reason(
    candidate: WindowSummary,
    baseline: WindowSummary,
    *,
    min_requests: int,
    error_rate_margin: float,
    ttft_p95_margin: float,
    ttft_p95_min_delta: float = 0.0,
    error_rate_ceiling: float | None = None,
    ttft_p95_ceiling: float | None = None,
) -> str | None:
    """Why the candidate variant must be rolled back, or None while it is no worse than allowed.

    The ceilings are absolute: past one, the candidate goes back whatever the baseline does (a
    baseline as bad as the canary must not make the canary look fine). A candidate that fails
    everything never gets a first token; its error rate alone judges it.
    """
    if candidate.requests < min_requests:
        return None
    if error_rate_ceiling is not None and candidate.error_rate > error_rate_ceiling:
        return f"error rate {candidate.error_rate:.3f} > ceiling {error_rate_ceiling:g}"
    if (
        ttft_p95_ceiling is not None
        and candidate.ttft_p95 is not None
        and candidate.ttft_p95 > ttft_p95_ceiling
    ):
        return f"p95 TTFT {candidate.ttft_p95:.3f}s > ceiling {ttft_p95_ceiling:g}s"
    if candidate.error_rate > baseline.error_rate + error_rate_margin and (
        baseline.requests >= min_requests or candidate.error_rate > error_rate_margin
    ):
        return (
            f"error rate {candidate.error_rate:.3f} > baseline {baseline.error_rate:.3f} "
            f"+ {error_rate_margin:g}"
        )
    if (
        baseline.requests >= min_requests
        and candidate.ttft_p95 is not None
        and baseline.ttft_p95 is not None
        and candidate.ttft_p95 > baseline.ttft_p95 * (1 + ttft_p95_margin)
        and candidate.ttft_p95 - baseline.ttft_p95 >= ttft_p95_min_delta
    ):
        return (
            f"p95 TTFT {candidate.ttft_p95:.3f}s > baseline {baseline.ttft_p95:.3f}s "
            f"x {1 + ttft_p95_margin:g}"
        )
    return None
