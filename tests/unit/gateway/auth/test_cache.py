"""The credential cache: a hard staleness bound, shared misses, negative entries."""

from __future__ import annotations

import asyncio

from gateway.auth.cache import CredentialCache


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class Source:
    """A loader whose answers the test changes, counting reads."""

    def __init__(self) -> None:
        self.values: dict[str, str] = {"a": "v1"}
        self.reads = 0
        self.gate: asyncio.Event | None = None

    async def load(self, key_id: str) -> str | None:
        self.reads += 1
        if self.gate is not None:
            await self.gate.wait()
        return self.values.get(key_id)


async def test_entries_are_reread_once_the_bound_has_passed() -> None:
    clock, source = Clock(), Source()
    cache = CredentialCache(source.load, ttl=5.0, max_entries=10, clock=clock)
    assert await cache.get("a") == "v1"
    source.values["a"] = "v2"
    clock.now += 4.9
    assert await cache.get("a") == "v1"
    clock.now += 0.1
    assert await cache.get("a") == "v2"
    assert source.reads == 2


async def test_unknown_ids_are_cached_too() -> None:
    clock, source = Clock(), Source()
    cache = CredentialCache(source.load, ttl=5.0, max_entries=10, clock=clock)
    assert await cache.get("nope") is None
    assert await cache.get("nope") is None
    assert source.reads == 1


async def test_concurrent_misses_share_one_read() -> None:
    clock, source = Clock(), Source()
    source.gate = asyncio.Event()
    cache = CredentialCache(source.load, ttl=5.0, max_entries=10, clock=clock)
    waiters = [asyncio.create_task(cache.get("a")) for _ in range(20)]
    await asyncio.sleep(0)
    source.gate.set()
    assert await asyncio.gather(*waiters) == ["v1"] * 20
    assert source.reads == 1


async def test_a_cancelled_caller_does_not_cancel_the_read_for_others() -> None:
    clock, source = Clock(), Source()
    source.gate = asyncio.Event()
    cache = CredentialCache(source.load, ttl=5.0, max_entries=10, clock=clock)
    first = asyncio.create_task(cache.get("a"))
    second = asyncio.create_task(cache.get("a"))
    await asyncio.sleep(0)
    first.cancel()
    source.gate.set()
    assert await second == "v1"
    assert source.reads == 1


async def test_invalidate_and_the_size_bound() -> None:
    clock, source = Clock(), Source()
    cache = CredentialCache(source.load, ttl=5.0, max_entries=3, clock=clock)
    await cache.get("a")
    cache.invalidate("a")
    await cache.get("a")
    assert source.reads == 2
    source.values.update(b="vb", c="vc", d="vd")  # known keys: unknown ones are bounded apart
    for key in ("b", "c", "d"):
        await cache.get(key)
    assert len(cache) <= 3
    cache.invalidate()
    assert len(cache) == 0


async def test_reread_skips_young_entries() -> None:
    clock, source = Clock(), Source()
    cache = CredentialCache(source.load, ttl=5.0, max_entries=10, clock=clock)
    await cache.get("a")
    source.values["a"] = "v2"
    assert await cache.reread("a", older_than=1.0) == "v1"
    clock.now += 1.0
    assert await cache.reread("a", older_than=1.0) == "v2"
    assert source.reads == 2


async def test_unknown_ids_are_bounded_apart_and_never_evict_known_ones() -> None:
    clock, source = Clock(), Source()
    cache = CredentialCache(
        source.load, ttl=5.0, max_entries=10, clock=clock, max_unknown=3, unknown_burst=1000
    )
    assert await cache.get("a") == "v1"
    for i in range(100):
        assert await cache.get(f"nope{i}") is None
    assert len(cache) == 1 + 3
    reads = source.reads
    assert await cache.get("a") == "v1"
    assert await cache.get("nope99") is None
    assert source.reads == reads  # both still cached


async def test_a_spent_failure_budget_sends_unknown_ids_through_a_short_slow_lane() -> None:
    clock, source = Clock(), Source()
    source.gate = asyncio.Event()
    cache = CredentialCache(
        source.load,
        ttl=5.0,
        max_entries=10,
        clock=clock,
        unknown_rate=1.0,
        unknown_burst=2.0,
        slow_lane_queue=3,
    )
    flood = [asyncio.create_task(cache.get(f"nope{i}")) for i in range(20)]
    await asyncio.sleep(0.01)
    assert source.reads == 2 + 1  # two on the budget, one in the slow lane, the others queued
    assert cache.refused == 20 - 2 - 3
    source.gate.set()
    assert await asyncio.gather(*flood) == [None] * 20
    assert source.reads == 2 + 3


async def test_real_keys_give_their_token_back_and_cached_keys_never_wait() -> None:
    clock, source = Clock(), Source()
    cache = CredentialCache(
        source.load,
        ttl=5.0,
        max_entries=10,
        clock=clock,
        unknown_rate=0.001,
        unknown_burst=1.0,
        slow_lane_queue=0,
    )
    assert await cache.get("a") == "v1"  # the token came back
    assert await cache.get("nope") is None  # spent it
    assert await cache.get("nope2") is None  # refused unread
    assert (source.reads, cache.refused) == (2, 1)
    clock.now += 10
    assert await cache.get("a") == "v1"  # a stale known entry is reread whatever the budget
    assert source.reads == 3
