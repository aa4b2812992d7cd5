"""The deployment's canary judgement on a real Redis: two replicas' routers, one decision.

Each "replica" is a router with its own ``RedisCanaries`` (its own replica id); ``sync`` is
called directly, so the test says when each replica pushes, judges and reads.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest
import redis

from gateway.config import parse_config
from gateway.metrics import GatewayMetrics
from gateway.routing.metrics import RoutingMetrics
from gateway.routing.pools import Pool
from gateway.routing.router import ModelRouter
from gateway.routing.shared_redis import RedisCanaries
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


class Replica:
    def __init__(self, url: str) -> None:
        config = parse_config(CONFIG, env={})
        pools = {name: Pool(name, p) for name, p in config.pools.items()}
        self.gateway_metrics = GatewayMetrics()
        self.metrics = RoutingMetrics(self.gateway_metrics)
        self.router = ModelRouter("m", config.models["m"], pools)
        self.router.judge_locally = False
        self.router.on_rollback = build_routing(config, self.metrics).on_rollback(self.router)
        self.canaries = RedisCanaries(url, prefix="test:canary", metrics=self.metrics)

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
