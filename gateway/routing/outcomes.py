"""The per-replica outcome feed: what each replica delivered, for whoever learns from it.

Every admitted exchange that a replica answered (however it ended, a client that left aside) is
reported once, as a :class:`ReplicaOutcome`, to every subscriber of the app's one
:class:`OutcomeFeed`. The app registers the subscribers in ``create_app``; the recorder publishes
each request's one :class:`~gateway.wire.outcome.Outcome`::

    feed = OutcomeFeed()
    feed.subscribe(book.observe)            # in create_app: one more consumer of the outcome
    feed.publish(outcome)                   # the recorder, once per settled exchange

:class:`OutcomeBook` is what routing keeps of it, one per pool (``Pool.outcomes``, carried over
a reload with the pool): per replica, the running figures (exponentially weighted) of time to
first token, time per output token, the share of prompt tokens the engine had cached, and the
error rate, which a scorer reads from its replica's view (``ReplicaView.outcomes``;
gateway/routing/scorers.py). ``create_app`` subscribes the table's books
(``gateway.runtime.outcomes``); a latency-predicting scorer (issue 38) subscribes its own model
the same way.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Protocol

from gateway.values import value
from gateway.wire.outcome import Ending, Outcome


@value
class ReplicaOutcome:
    """One settled exchange as the replica that answered it delivered it."""

    model: str
    pool: str
    replica: str
    """The replica's label (its URL, credentials redacted), as routing's views show it."""
    prompt_tokens: int
    cached_tokens: int
    ttft: float | None
    """Seconds to the first token (None when none came or the request failed)."""
    tpot: float | None
    """Seconds per output token after the first (None with fewer than two)."""
    error: bool
    """The upstream failed it (a 5xx, a connect or read failure, a stall)."""

    @classmethod
    def of(cls, outcome: Outcome) -> ReplicaOutcome | None:
        """The replica's part of ``outcome``; None when no replica answered it, or when the
        client's doing (gone, a 4xx) says nothing about the replica."""
        route = outcome.route
        if (
            not outcome.admitted
            or outcome.model is None
            or route.pool is None
            or route.replica is None
            or outcome.ending is Ending.CLIENT_GONE
            or outcome.client_caused
        ):
            return None
        error = outcome.upstream_failed
        return cls(
            outcome.model,
            route.pool,
            route.replica,
            outcome.usage.input_tokens,
            outcome.usage.cached_tokens,
            None if error else outcome.time_to_first_token,
            None if error else outcome.time_per_output_token,
            error,
        )


Subscriber = Callable[[ReplicaOutcome], None]


class OutcomeFeed:
    """Hands each replica outcome to every subscriber, in the order they subscribed."""

    def __init__(self) -> None:
        self._subscribers: list[Subscriber] = []

    def subscribe(self, subscriber: Subscriber) -> None:
        self._subscribers.append(subscriber)

    def publish(self, outcome: Outcome) -> None:
        """Synchronous, like the rest of the recorder: nothing here can be cancelled half way."""
        if not self._subscribers:
            return
        found = ReplicaOutcome.of(outcome)
        if found is None:
            return
        for subscriber in self._subscribers:
            subscriber(found)


@dataclass(slots=True)
class ReplicaFigures:
    """One replica's running figures (exponentially weighted; None until a sample came)."""

    exchanges: int = 0
    ttft: float | None = None
    tpot: float | None = None
    cached_share: float | None = None
    error_rate: float = 0.0


ALPHA = 0.2
"""Each new sample's weight: about the last ten exchanges count."""

MAX_REPLICAS = 4096
"""Replicas kept at most: labels come from config, never from a client, but a reload that
renames them should not grow the book without end."""


class OutcomeBook:
    """One pool's replicas, by label: what each delivered lately."""

    def __init__(self, alpha: float = ALPHA) -> None:
        self._alpha = alpha
        self._figures: dict[str, ReplicaFigures] = {}

    def observe(self, outcome: ReplicaOutcome) -> None:
        key = outcome.replica
        figures = self._figures.get(key)
        if figures is None:
            if len(self._figures) >= MAX_REPLICAS:
                self._figures.pop(next(iter(self._figures)))  # the oldest entry
            figures = self._figures[key] = ReplicaFigures()
        a = self._alpha
        figures.exchanges += 1
        figures.error_rate += a * ((1.0 if outcome.error else 0.0) - figures.error_rate)
        figures.ttft = _mix(figures.ttft, outcome.ttft, a)
        figures.tpot = _mix(figures.tpot, outcome.tpot, a)
        if outcome.prompt_tokens > 0:
            share = min(1.0, outcome.cached_tokens / outcome.prompt_tokens)
            figures.cached_share = _mix(figures.cached_share, share, a)

    def figures(self, replica: str) -> ReplicaFigures | None:
        return self._figures.get(replica)


def _mix(old: float | None, new: float | None, alpha: float) -> float | None:
    if new is None:
        return old
    return new if old is None else old + alpha * (new - old)


class _HasBook(Protocol):
    @property
    def outcomes(self) -> OutcomeBook: ...


def to_pool_books(pools: Callable[[], Mapping[str, _HasBook]]) -> Subscriber:
    """The subscriber that hands each outcome to its pool's book, in the table current when it
    settled (``pools()``); a pool a reload removed meanwhile learns nothing more."""

    def observe(outcome: ReplicaOutcome) -> None:
        pool = pools().get(outcome.pool)
        if pool is not None:
            pool.outcomes.observe(outcome)

    return observe
