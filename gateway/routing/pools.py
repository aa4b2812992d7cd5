"""Upstream pools: replicas, their choice, health and saturation (the load itself is the book's).

A replica leaves the rotation when an active check fails (until one succeeds), or when its circuit
breaker opens after consecutive failed requests (passive health; after ``breaker.open_seconds`` one
probe request is let through and its outcome closes or reopens the breaker). A pool with a
``capacity`` is saturated while that many requests are in flight on it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable, Collection, Iterator
from dataclasses import dataclass, field

from gateway.errors import NoHealthyUpstream
from gateway.redact import redact_url
from gateway.routing.breaker import BreakerState, CircuitBreaker
from gateway.routing.config import PoolConfig
from gateway.routing.load import Hold, LocalLoadBook, PoolSnapshot
from gateway.routing.outcomes import OutcomeBook
from gateway.routing.policy import NO_SCORES, ReplicaScores, best_replica
from gateway.routing.prefix import PromptBlocks
from gateway.upstream.client import UpstreamClient

logger = logging.getLogger(__name__)

ProbeFn = Callable[[str], Awaitable[str | None]]
"""``await probe(base_url)`` is None when the replica is healthy, else a short reason."""


@dataclass(slots=True, eq=False)
class Replica:
    url: str
    """The base URL, without ``/v1``."""
    breaker: CircuitBreaker
    healthy: bool = True
    """The active check's verdict."""
    last_error: str | None = None
    last_failure: str | None = None
    """Why the breaker last counted a failure (for /readyz and logs)."""
    label: str = field(init=False)
    """The URL as shown anywhere (logs, metrics, spans, admin views): credentials redacted.
    Made once: every request's route facts, metrics and log line carry it; the load book
    counts the replica under it."""

    def __post_init__(self) -> None:
        self.label = redact_url(self.url)

    @property
    def available(self) -> bool:
        """In rotation: the active check passes and the breaker lets a request through."""
        return self.healthy and self.breaker.allows()


class Pool:
    """Replicas of one pool, their health and breakers; the load on them is the load book's
    (gateway/routing/load.py), which :meth:`take` and :meth:`give_back` write through::

        hold = pool.take(exclude=tried)    # the best-scoring replica, counted in the book
        ...  # send to hold.replica.url
        pool.give_back(hold)
        pool.record(replica, failure)       # its breaker learns how it went (None: fine)

    A request's take and give-back are owned by :class:`gateway.routing.attempts.Attempts`.
    """

    def __init__(
        self,
        name: str,
        config: PoolConfig,
        clock: Callable[[], float] = time.monotonic,
        *,
        client: UpstreamClient | None = None,
        book: LocalLoadBook | None = None,
    ) -> None:
        self.name = name
        self.config = config
        self._client = client
        self.replicas = [Replica(url, CircuitBreaker(config.breaker, clock)) for url in config.urls]
        self._next = 0  # rotates the starting point so equal loads spread evenly
        self.forward_headers = frozenset(n.encode() for n in config.forward_headers)
        self.book: LocalLoadBook = book if book is not None else LocalLoadBook(clock)
        """Where the pool's load is counted (the app's one book; a pool alone gets its own)."""
        self.book.add(self)
        self.outcomes = OutcomeBook()
        """What each replica delivered lately (the outcome feed; the scorers read it)."""
        self.retired = False
        """Set when a config reload replaced or removed the pool; its requests may finish."""

    @property
    def client(self) -> UpstreamClient:
        """The pool's own upstream client: a request reaches it through the pool it was routed
        to, never by name, so a reload cannot take it away mid-request."""
        if self._client is None:
            raise RuntimeError(f"pool {self.name!r} was built without a client")
        return self._client

    @property
    def healthy(self) -> bool:
        return any(r.available for r in self.replicas)

    def load(self) -> PoolSnapshot:
        """The pool's load now, as the book says (admin views, metrics, tests)."""
        return self.book.pool_load(self)

    @property
    def in_flight(self) -> int:
        """Requests this gateway has in flight on the pool (the book's count)."""
        return self.book.own(self.name)[0]

    @property
    def saturated(self) -> bool:
        return self.saturation() is not None

    def saturation(self, pending: int = 0, held_back: tuple[int, int] = (0, 0)) -> str | None:
        """Which bound the pool is past now (the book's figures), counting ``pending``
        requests about to arrive; None: headroom."""
        return self.load().saturation(self.config, pending, held_back)

    def choose(
        self,
        exclude: Collection[Replica] = (),
        scores: ReplicaScores = NO_SCORES,
        load: PoolSnapshot | None = None,
    ) -> Replica:
        """The available replica, not one of ``exclude``, that scores best on ``load`` (the
        request's snapshot; none: the book's figures now); with no scorer, the one with the
        fewest requests outstanding."""
        replicas = self.replicas
        count = len(replicas)
        start = self._next
        self._next = (start + 1) % count
        if load is None or len(load.replicas) != count:
            load = self.load()
        best = best_replica(replicas, start, exclude, scores, load, self.outcomes)
        if best is None:
            raise NoHealthyUpstream(
                f"No healthy upstream in pool {self.name!r}; try again shortly.",
                headers={"retry-after": "1"},
            )
        return best

    @contextlib.contextmanager
    def acquire(self, exclude: Collection[Replica] = ()) -> Iterator[Replica]:
        hold = self.take(exclude)
        try:
            yield hold.replica
        finally:
            self.give_back(hold)

    def take(
        self,
        exclude: Collection[Replica] = (),
        scores: ReplicaScores = NO_SCORES,
        prompt_tokens: int = 0,
        blocks: PromptBlocks | None = None,
        starting: bool = False,
        *,
        tenant: str = "",
        load: PoolSnapshot | None = None,
    ) -> Hold:
        """Choose a replica and count the request on it in the book; pair with
        :meth:`give_back`. ``blocks``: the prompt, recorded in the prefix index. ``starting``:
        a streamed request, counted as starting until its first token (or its give-back).
        ``tenant``: whose place it holds (flow control's reserve)."""
        replica = self.choose(exclude, scores, load)
        replica.breaker.on_attempt()
        return self.book.take(
            self,
            replica,
            tenant=tenant,
            prompt_tokens=prompt_tokens,
            starting=starting,
            blocks=blocks,
        )

    def give_back(self, hold: Hold) -> None:
        self.book.give_back(hold)

    def record(self, replica: Replica, failure: str | None) -> None:
        """The outcome of one request to ``replica``: None for success, else a short reason."""
        if failure is not None:
            replica.last_failure = failure
        if replica.breaker.record(failure is None):
            self._log_breaker(replica)

    def trip(self, replica: Replica, reason: str) -> None:
        """Open the replica's breaker at once (it could not be connected to)."""
        replica.last_failure = reason
        was_closed = replica.breaker.state is BreakerState.CLOSED
        replica.breaker.trip()
        if was_closed:
            self._log_breaker(replica)

    def _log_breaker(self, replica: Replica) -> None:
        state = replica.breaker.state.value
        logger.warning(
            "replica circuit breaker " + state,
            extra={
                "fields": {
                    "pool": self.name,
                    "replica": replica.label,
                    "breaker": state,
                    "reason": replica.last_failure,
                }
            },
        )

    def mark_down(self, replica: Replica, reason: str) -> None:
        if replica.healthy:
            logger.warning(
                "replica left rotation",
                extra={"fields": {"pool": self.name, "replica": replica.label, "reason": reason}},
            )
        replica.healthy = False
        replica.last_error = reason

    def mark_up(self, replica: Replica) -> None:
        if not replica.healthy:
            logger.info(
                "replica back in rotation",
                extra={"fields": {"pool": self.name, "replica": replica.label}},
            )
        replica.healthy = True
        replica.last_error = None


async def check_forever(pool: Pool, probe: ProbeFn) -> None:
    """Probe every replica of ``pool`` every ``health.interval`` seconds, until cancelled or
    until a config reload retires the pool."""
    while not pool.retired:
        await asyncio.sleep(pool.config.health.interval)
        if not pool.retired:
            await check_once(pool, probe)


async def check_once(pool: Pool, probe: ProbeFn) -> None:
    results = await asyncio.gather(*(probe(r.url) for r in pool.replicas))
    for replica, error in zip(pool.replicas, results, strict=True):
        if error is None:
            pool.mark_up(replica)
        else:
            pool.mark_down(replica, error)
