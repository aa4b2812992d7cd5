from __future__ import annotations

import itertools
from collections.abc import AsyncIterator, Callable, Iterator

import pytest

from gateway.limits.memory import MemoryLimiter
from gateway.limits.redis_backend import RedisLimiter
from gateway.limits.types import LimiterBackend
from tests.redisserver import RedisServer, redis_available, spawn_redis

START = 1_800_000_000.0  # 2027-01-15 08:00 UTC: far from a day boundary


class FakeClock:
    def __init__(self, now: float = START) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


@pytest.fixture(scope="session")
def redis_server() -> Iterator[RedisServer]:
    if not redis_available():
        pytest.fail("redis-server is not installed (Debian package redis-server)")
    server = spawn_redis()
    yield server
    server.stop()


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


_prefixes = itertools.count()

MakeLimiter = Callable[[], LimiterBackend]


@pytest.fixture(params=["memory", "redis"])
async def limiter(
    request: pytest.FixtureRequest, clock: FakeClock
) -> AsyncIterator[LimiterBackend]:
    """The same suite runs against both backends, on the same injected clock."""
    backend: LimiterBackend
    if request.param == "memory":
        backend = MemoryLimiter(clock=clock)
    else:
        server: RedisServer = request.getfixturevalue("redis_server")
        backend = RedisLimiter(server.url, prefix=f"t{next(_prefixes)}", clock=clock)
    yield backend
    await backend.aclose()
