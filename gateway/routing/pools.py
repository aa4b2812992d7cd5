"""Upstream pools: replicas, least-outstanding-requests choice, health and saturation.

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
from gateway.routing.gauges import EngineGauges
from gateway.routing.outcomes import OutcomeBook
from gateway.routing.policy import NO_SCORES, ReplicaScores, best_replica, saturation
from gateway.routing.prefix import PrefixIndex, PromptBlocks
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
    outstanding: int = 0
    prompt_tokens: int = 0
    """Prompt tokens of the requests this gateway has in flight on the replica."""
    gauges: EngineGauges | None = None
    """The replica's own engine gauges, when the pool reads each replica's ``/metrics``."""
    last_error: str | None = None
    last_failure: str | None = None
    """Why the breaker last counted a failure (for /readyz and logs)."""
    label: str = field(init=False)
    """The URL as shown anywhere (logs, metrics, spans, admin views): credentials redacted.
    Made once: every request's route facts, metrics and log line carry it."""

    def __post_init__(self) -> None:
        self.label = redact_url(self.url)

    @property
    def available(self) -> bool:
        """In rotation: the active check passes and the breaker lets a request through."""
        return self.healthy and self.breaker.allows()


class Pool:
    """Replicas of one pool; :meth:`take` picks the one with the fewest requests outstanding,
    and :meth:`give_back` frees it (a request's take and give-back are owned by
    :class:`gateway.routing.attempts.Attempts`)::

        replica = pool.take(exclude=tried)
        ...  # send to replica.url
        pool.give_back(replica)
        pool.record(replica, failure)       # its breaker learns how it went (None: fine)
    """

    def __init__(
        self,
        name: str,
        config: PoolConfig,
        clock: Callable[[], float] = time.monotonic,
        *,
        client: UpstreamClient | None = None,
    ) -> None:
        self.name = name
        self.config = config
        self._client = client
        self.replicas = [Replica(url, CircuitBreaker(config.breaker, clock)) for url in config.urls]
        self._next = 0  # rotates the starting point so equal loads spread evenly
        self.forward_headers = frozenset(n.encode() for n in config.forward_headers)
        self.starting = 0
        """Streamed requests sent to the pool whose first token has not come back yet."""
        self.others: tuple[int, int] = (0, 0)
        """In-flight requests and prompt tokens of the other gateway replicas (shared load)."""
        signals = config.signals
        self.gauges = EngineGauges(signals.max_age, clock)
        """The pool's engines as their gauges say (``signals.metrics_urls``)."""
        if signals.replica_metrics:
            for replica in self.replicas:
                replica.gauges = EngineGauges(signals.max_age, clock)
        self.prefix = (
            PrefixIndex(config.prefix_index_blocks, len(self.replicas))
            if config.prefix_index_blocks
            else None
        )
        self.outcomes = OutcomeBook()
        """What each replica delivered lately (the outcome feed; the scorers read it)."""
        self.on_release: Callable[[], None] | None = None
        """Told whenever a request leaves the pool (the flow-control queue may dispatch)."""
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
    def in_flight(self) -> int:
        """Requests this gateway has in flight on the pool: its replicas' own counts, summed
        (one count per request, kept on the replica that took it)."""
        return sum(r.outstanding for r in self.replicas)

    @property
    def prompt_tokens(self) -> int:
        """Prompt tokens of the requests this gateway has in flight on the pool."""
        return sum(r.prompt_tokens for r in self.replicas)

    @property
    def healthy(self) -> bool:
        return any(r.available for r in self.replicas)

    @property
    def saturated(self) -> bool:
        return self.saturation() is not None

    def saturation(self, pending: int = 0, held_back: tuple[int, int] = (0, 0)) -> str | None:
        """Which bound the pool is past (``in_flight``, ``starting``, ``waiting``, ``kv_usage``,
        ``prompt_tokens``), counting ``pending`` requests about to arrive; None: headroom.
        ``held_back``: places and starts the request may not use (flow control's reserve)."""
        others_in_flight, others_tokens = self.others
        return saturation(
            self.config,
            self.in_flight + others_in_flight + pending,
            self.prompt_tokens + others_tokens,
            self.gauges.fresh(),
            self.starting + pending,
            held_back,
        )

    def choose(
        self, exclude: Collection[Replica] = (), scores: ReplicaScores = NO_SCORES
    ) -> Replica:
        """The available replica, not one of ``exclude``, that scores best (prefix affinity and
        load, ``scores``); with no scorer, the one with the fewest requests outstanding."""
        replicas = self.replicas
        count = len(replicas)
        start = self._next
        self._next = (start + 1) % count
        best = best_replica(replicas, start, exclude, scores, self.name, self.outcomes)
        if best is None:
            raise NoHealthyUpstream(
                f"No healthy upstream in pool {self.name!r}; try again shortly.",
                headers={"retry-after": "1"},
            )
        return best

    @contextlib.contextmanager
    def acquire(self, exclude: Collection[Replica] = ()) -> Iterator[Replica]:
        replica = self.take(exclude)
        try:
            yield replica
        finally:
            self.give_back(replica)

    def take(
        self,
        exclude: Collection[Replica] = (),
        scores: ReplicaScores = NO_SCORES,
        prompt_tokens: int = 0,
        blocks: PromptBlocks | None = None,
        starting: bool = False,
    ) -> Replica:
        """Choose a replica and count the request on it; pair with :meth:`give_back` (with the
        same ``prompt_tokens``). ``blocks``: the prompt, recorded in the prefix index.
        ``starting``: a streamed request, counted as starting until :meth:`started` (or its
        give-back, with ``starting`` again, if its first token never came)."""
        replica = self.choose(exclude, scores)
        replica.breaker.on_attempt()
        replica.outstanding += 1
        replica.prompt_tokens += prompt_tokens
        self.starting += starting
        if blocks is not None and blocks.hashes and self.prefix is not None:
            self.prefix.record(blocks, self.replicas.index(replica))
        return replica

    def give_back(self, replica: Replica, prompt_tokens: int = 0, starting: bool = False) -> None:
        replica.outstanding -= 1
        replica.prompt_tokens -= prompt_tokens
        self.starting -= starting
        if self.on_release is not None:
            self.on_release()

    def started(self) -> None:
        """A starting request's first token came back: the engine took it into its batch, so
        another may start (the flow-control queue is told at once, as on a give-back)."""
        self.starting -= 1
        if self.on_release is not None:
            self.on_release()

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
