"""The load view that gateway replicas share through a real Redis (routing/load_redis.py)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest
import redis.asyncio as aioredis

from gateway.routing.config import PoolConfig
from gateway.routing.load_redis import SharedLoad
from gateway.routing.pools import Pool
from tests.redisserver import RedisServer, redis_available, spawn_redis

pytestmark = pytest.mark.skipif(not redis_available(), reason="needs redis-server")


@pytest.fixture
def redis_server() -> Iterator[RedisServer]:
    server = spawn_redis()
    yield server
    server.stop()


def pool(capacity: int = 11) -> Pool:
    return Pool("colo", PoolConfig(urls=("http://r:1",), capacity=capacity))


async def test_each_replica_sees_the_others_load_not_its_own(redis_server: RedisServer) -> None:
    one, two = pool(), pool()
    a = SharedLoad(aioredis.Redis.from_url(redis_server.url), prefix="t", replica_id="a")
    b = SharedLoad(aioredis.Redis.from_url(redis_server.url), prefix="t", replica_id="b")
    try:
        for _ in range(6):
            one.take(prompt_tokens=100)
        two.take(prompt_tokens=50)
        await a.exchange([one])
        await b.exchange([two])
        await a.exchange([one])
        assert one.others == (1, 50) and two.others == (6, 600)
        for _ in range(3):
            two.take(prompt_tokens=10)
        await b.exchange([two])
        await a.exchange([one])
        assert one.others == (4, 80)
        assert one.saturation() is None
        one.take()
        assert one.saturation() == "in_flight"  # 7 here and 4 there reach the capacity of 11
    finally:
        await a.aclose()
        await b.aclose()


async def test_a_replica_gone_quiet_stops_counting_after_max_age(redis_server: RedisServer) -> None:
    one, two = pool(), pool()
    a = SharedLoad(aioredis.Redis.from_url(redis_server.url), prefix="t", replica_id="a")
    b = SharedLoad(
        aioredis.Redis.from_url(redis_server.url), prefix="t", replica_id="b", max_age=0.05
    )
    quiet = SharedLoad(
        aioredis.Redis.from_url(redis_server.url), prefix="t", replica_id="a", max_age=0.05
    )
    try:
        two.take()
        await a.exchange([one])
        assert one.others == (0, 0)
        await b.exchange([two])
        await a.exchange([one])
        assert one.others[0] == 1  # b's request counts while b's entry is fresh
        # b says nothing from now on: once its entry is older than max_age (Redis's own clock,
        # so polled, with a generous deadline), it no longer counts.
        async with asyncio.timeout(30):
            while one.others != (0, 0):
                await asyncio.sleep(0.02)
                await quiet.exchange([one])
    finally:
        await quiet.aclose()
        await a.aclose()
        await b.aclose()


async def test_an_unreachable_redis_leaves_the_own_view() -> None:
    one = pool()
    one.others = (5, 5)
    lost = SharedLoad(
        aioredis.Redis.from_url("redis://127.0.0.1:1/0", socket_timeout=0.2), prefix="t"
    )
    await lost.exchange([one])
    assert one.others == (0, 0)
    await lost.aclose()
