"""The deployment's canary judgement on a real Redis: two replicas' routers, one decision.

Each "replica" is a router with its own ``RedisCanaries`` (its own replica id); ``sync`` is
called directly, so the test says when each replica pushes, judges and reads. The sync loop's own
cadence runs on a :class:`ManualClock` with its sleep held by the test (:class:`Sleeps`): one
``tick`` is one more sync, so how late a replica applies a rollback is counted in syncs, not timed.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from typing import Any

import pytest
import redis

from gateway.clock import SYSTEM_CLOCK, Clock, ManualClock
from gateway.config import parse_config
from gateway.metrics import GatewayMetrics
from gateway.routing.canary_judges_redis import JUDGE_SECONDS, SYNC_SECONDS, RedisCanaries
from gateway.routing.metrics import RoutingMetrics
from gateway.routing.pools import Pool
from gateway.routing.router import ModelRouter
from gateway.runtime.table import build_routing
from tests.redisserver import RedisServer, redis_available, spawn_redis

pytestmark = pytest.mark.skipif(not redis_available(), reason="needs redis-server")

CONFIG: dict[str, Any] = {
    "pools": {"s": {"urls": ["http://s:1"]}, "c": {"urls": ["http://c:1"]}},
    "models": {
        "m": {
            "variants": {
                "stable": {"weight": 50, "pools": {"colocated": "s"}},
                "canary": {"weight": 50, "pools": {"colocated": "c"}},
            },
            "canary": {"baseline": "stable", "min_requests": 10},
        }
    },
}


@pytest.fixture(scope="module")
def server() -> Iterator[RedisServer]:
    server = spawn_redis()
    yield server
    server.stop()


class Sleeps:
    """A sync loop's sleep that lasts until the test wakes it: ``tick`` runs one more sync."""

    def __init__(self) -> None:
        self.asked: list[float] = []
        """The seconds the loop asked to sleep, one entry per sync it ran."""
        self._asleep = asyncio.Event()
        self._wake = asyncio.Event()

    async def sleep(self, seconds: float) -> None:
        self.asked.append(seconds)
        self._asleep.set()
        await self._wake.wait()
        self._wake.clear()

    async def asleep(self) -> None:
        """Until the loop has run its sync and waits for the next (a deadline, not a timing)."""
        await asyncio.wait_for(self._asleep.wait(), 10)

    async def tick(self) -> None:
        self._asleep.clear()
        self._wake.set()
        await self.asleep()


class Replica:
    def __init__(
        self,
        url: str,
        clock: Clock = SYSTEM_CLOCK,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        config = parse_config(CONFIG, env={})
        pools = {name: Pool(name, p) for name, p in config.pools.items()}
        self.gateway_metrics = GatewayMetrics()
        self.metrics = RoutingMetrics(self.gateway_metrics)
        self.router = ModelRouter("m", config.models["m"], pools, clock.monotonic, clock.wall)
        self.router.judge_locally = False
        self.router.on_rollback = build_routing(config, self.metrics).on_rollback(self.router)
        self.canaries = RedisCanaries(
            url, prefix="test:canary", metrics=self.metrics, clock=clock, sleep=sleep
        )

    async def sync(self, judge: bool = True) -> None:
        await self.canaries.sync(lambda: [self.router], judge=judge)

    def rollbacks(self) -> float:
        labels = {"model": "m", "variant": "canary"}
        value = self.gateway_metrics.registry.get_sample_value(
            "gateway_canary_rollbacks_total", labels
        )
        return value or 0.0


@pytest.fixture
async def replicas(server: RedisServer) -> AsyncIterator[tuple[Replica, Replica]]:
    redis.Redis.from_url(server.url).flushall()
    a, b = Replica(server.url), Replica(server.url)
    yield a, b
    await a.canaries.aclose()
    await b.canaries.aclose()


async def test_samples_of_every_replica_make_one_decision(
    replicas: tuple[Replica, Replica],
) -> None:
    a, b = replicas
    for replica in (a, b):  # 6 canary errors each: neither alone reaches min_requests
        for _ in range(6):
            replica.router.observe(replica.router.variants["canary"], True, None)
            replica.router.observe(replica.router.variants["stable"], False, 0.01)
    await a.sync()
    assert not a.router.variants["canary"].rolled_back  # only a's 6 samples so far
    await b.sync()  # b's push makes 12: b decides
    assert b.router.variants["canary"].rolled_back
    await a.sync()  # a applies what b decided, and does not decide again
    canary_a, canary_b = a.router.variants["canary"], b.router.variants["canary"]
    assert canary_a.rolled_back and canary_a.weight == 0
    assert canary_a.rollback is not None and canary_b.rollback is not None
    assert canary_a.rollback.by == b.canaries.replica
    assert canary_a.rollback.at == canary_b.rollback.at
    assert "error rate" in (canary_a.rollback.reason or "")
    assert (a.rollbacks(), b.rollbacks()) == (0, 1)  # one decision, counted once


async def test_reenabling_on_one_replica_reaches_the_others(
    replicas: tuple[Replica, Replica],
) -> None:
    a, b = replicas
    for _ in range(12):
        a.router.observe(a.router.variants["canary"], True, None)
    await a.sync()
    await b.sync()
    assert b.router.variants["canary"].rolled_back
    await b.canaries.set_weight(b.router, "canary", 20.0, "ops")
    await a.sync()
    canary = a.router.variants["canary"]
    assert not canary.rolled_back and canary.weight == 20.0
    assert canary.reenabled is not None and canary.reenabled.by == "ops"
    await a.sync()  # the old errors were cleared with the rollback: no second rollback
    assert not a.router.variants["canary"].rolled_back


async def test_a_rollback_survives_redis_losing_it(
    replicas: tuple[Replica, Replica], server: RedisServer
) -> None:
    a, _ = replicas
    for _ in range(12):
        a.router.observe(a.router.variants["canary"], True, None)
    await a.sync()
    redis.Redis.from_url(server.url).flushall()  # a restart without persistence
    await a.sync(judge=False)  # a still holds it: published again
    fresh = Replica(server.url)
    try:
        await fresh.sync(judge=False)
        assert fresh.router.variants["canary"].rolled_back
    finally:
        await fresh.canaries.aclose()


async def test_a_replica_applies_a_rollback_decided_elsewhere_at_its_next_sync(
    server: RedisServer,
) -> None:
    """The bound on how late a replica stops sending to a rolled back canary: its next sync,
    one sync period after the decision, even when that sync does not judge (judging is every
    JUDGE_SECONDS, reading the state every SYNC_SECONDS)."""
    redis.Redis.from_url(server.url).flushall()
    clock = ManualClock()
    sleeps_a, sleeps_b = Sleeps(), Sleeps()
    a = Replica(server.url, clock, sleeps_a.sleep)
    b = Replica(server.url, clock, sleeps_b.sleep)
    try:
        await a.canaries.start(lambda: [a.router])
        await sleeps_a.asleep()  # a's first sync: judged, nothing to judge yet
        clock.advance(JUDGE_SECONDS - SYNC_SECONDS)
        await b.canaries.start(lambda: [b.router])
        await sleeps_b.asleep()  # b judged later than a: its next sync only reads the state
        clock.advance(SYNC_SECONDS)
        for _ in range(12):
            a.router.observe(a.router.variants["canary"], True, None)
        await sleeps_a.tick()  # a's judging sync decides
        canary_a, canary_b = a.router.variants["canary"], b.router.variants["canary"]
        assert canary_a.rolled_back and not canary_b.rolled_back
        assert canary_a.rollback is not None
        clock.advance(SYNC_SECONDS)
        b.router.observe(b.router.variants["stable"], False, 0.01)
        await sleeps_b.tick()  # b's next sync, a reading one: it applies a's decision
        assert b.router.variants["stable"].unsent  # not pushed: that sync did not judge
        assert canary_b.rolled_back and canary_b.weight == 0
        assert canary_b.rollback is not None and canary_b.rollback.by == a.canaries.replica
        assert canary_b.rollback.at == canary_a.rollback.at
        assert canary_b.rollback_applied_at is not None
        assert canary_b.rollback_applied_at - canary_a.rollback.at <= SYNC_SECONDS
        assert sleeps_b.asked == [SYNC_SECONDS, SYNC_SECONDS]  # a period between syncs
        assert (a.rollbacks(), b.rollbacks()) == (1, 0)  # one decision, counted once
    finally:
        await a.canaries.aclose()
        await b.canaries.aclose()
