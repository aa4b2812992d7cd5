"""Upstream pools: replicas, least-outstanding-requests choice, and health.

A replica leaves the rotation when an active check fails or a request cannot connect to it (passive
health); the next successful active check brings it back.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass

from gateway.config import PoolConfig
from gateway.errors import NoHealthyUpstream

logger = logging.getLogger(__name__)

ProbeFn = Callable[[str], Awaitable[str | None]]
"""``await probe(base_url)`` is None when the replica is healthy, else a short reason."""


@dataclass(slots=True, eq=False)
class Replica:
    url: str
    """The base URL, without ``/v1``."""
    healthy: bool = True
    outstanding: int = 0
    last_error: str | None = None


class Pool:
    """Replicas of one pool; :meth:`acquire` picks the one with the fewest requests outstanding::

    with pool.acquire() as replica:
        ...  # send to replica.url
    """

    def __init__(self, name: str, config: PoolConfig) -> None:
        self.name = name
        self.config = config
        self.replicas = [Replica(url) for url in config.urls]
        self.forward_headers = frozenset(n.encode() for n in config.forward_headers)
        self._next = 0  # rotates the starting point so equal loads spread evenly

    @property
    def healthy(self) -> bool:
        return any(r.healthy for r in self.replicas)

    def choose(self) -> Replica:
        replicas = self.replicas
        count = len(replicas)
        start = self._next
        self._next = (start + 1) % count
        best: Replica | None = None
        for i in range(count):
            replica = replicas[(start + i) % count]
            if replica.healthy and (best is None or replica.outstanding < best.outstanding):
                best = replica
        if best is None:
            raise NoHealthyUpstream(
                f"No healthy upstream in pool {self.name!r}; try again shortly.",
                headers={"retry-after": "1"},
            )
        return best

    @contextlib.contextmanager
    def acquire(self) -> Iterator[Replica]:
        replica = self.choose()
        replica.outstanding += 1
        try:
            yield replica
        finally:
            replica.outstanding -= 1

    def mark_down(self, replica: Replica, reason: str) -> None:
        if replica.healthy:
            logger.warning(
                "replica left rotation",
                extra={"fields": {"pool": self.name, "replica": replica.url, "reason": reason}},
            )
        replica.healthy = False
        replica.last_error = reason

    def mark_up(self, replica: Replica) -> None:
        if not replica.healthy:
            logger.info(
                "replica back in rotation",
                extra={"fields": {"pool": self.name, "replica": replica.url}},
            )
        replica.healthy = True
        replica.last_error = None


async def check_forever(pool: Pool, probe: ProbeFn) -> None:
    """Probe every replica of ``pool`` every ``health.interval`` seconds, until cancelled."""
    while True:
        await asyncio.sleep(pool.config.health.interval)
        await check_once(pool, probe)


async def check_once(pool: Pool, probe: ProbeFn) -> None:
    results = await asyncio.gather(*(probe(r.url) for r in pool.replicas))
    for replica, error in zip(pool.replicas, results, strict=True):
        if error is None:
            pool.mark_up(replica)
        else:
            pool.mark_down(replica, error)
