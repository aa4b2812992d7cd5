"""What only the Redis backend has: its counters expire, and a carried debt must outlive its day."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
import redis.asyncio as aioredis

from gateway.limits.config import LimitValues
from gateway.limits.maths import DAY
from gateway.limits.redis_backend import RedisLimiter
from gateway.limits.types import Subject
from tests.redisserver import RedisServer
from tests.unit.gateway.limits.conftest import FakeClock

KEY = Subject("key", "k1", LimitValues(daily_tokens=1000))


@pytest.fixture
async def client(redis_server: RedisServer) -> AsyncIterator[aioredis.Redis]:
    client = aioredis.Redis.from_url(redis_server.url)
    yield client
    await client.aclose()


async def test_a_debt_of_several_days_keeps_its_counter_until_it_is_paid(
    redis_server: RedisServer, client: aioredis.Redis, clock: FakeClock
) -> None:
    limiter = RedisLimiter(redis_server.url, prefix="expiry-debt", clock=clock)
    decision = await limiter.acquire((KEY,), 100, "r1")
    assert decision.ticket is not None
    limiter.settle(decision.ticket, 2600)  # 2600 used: it still counts on the next two days
    await limiter.aclose()
    end_of_debt = (clock.now // DAY + 3) * DAY
    ttl = await client.ttl("{expiry-debt}:key:k1")
    assert end_of_debt - clock.now < ttl <= end_of_debt - clock.now + 2


async def test_a_day_within_its_quota_expires_at_midnight(
    redis_server: RedisServer, client: aioredis.Redis, clock: FakeClock
) -> None:
    limiter = RedisLimiter(redis_server.url, prefix="expiry-quota", clock=clock)
    decision = await limiter.acquire((KEY,), 100, "r1")
    assert decision.ticket is not None
    limiter.settle(decision.ticket, 900)
    await limiter.aclose()
    midnight = (clock.now // DAY + 1) * DAY
    ttl = await client.ttl("{expiry-quota}:key:k1")
    assert midnight - clock.now < ttl <= midnight - clock.now + 2
