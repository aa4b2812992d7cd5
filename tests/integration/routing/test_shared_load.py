"""The load book shared through a real Redis (gateway/routing/load_redis.py): two books on one
Redis see each other's in flight, starting, held places and prefix hints, and stop counting a
book gone quiet."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest
import redis.asyncio as aioredis

from gateway.routing.config import PoolConfig
from gateway.routing.load_config import LoadSharingConfig
from gateway.routing.load_redis import RedisLoadBook
from gateway.routing.pools import Pool
from gateway.routing.prefix import prompt_blocks
from gateway.wire.request import Operation
from tests.redisserver import RedisServer, redis_available, spawn_redis

pytestmark = pytest.mark.skipif(not redis_available(), reason="needs redis-server")

URLS = ("http://r0:1", "http://r1:1")


@pytest.fixture
def redis_server() -> Iterator[RedisServer]:
    server = spawn_redis()
    yield server
    server.stop()


def book(url: str, name: str, **config: object) -> RedisLoadBook:
    settings = LoadSharingConfig.model_validate(
        {"backend": "redis", "redis_url": url, "key_prefix": "t", **config}
    )
    return RedisLoadBook(aioredis.Redis.from_url(url), settings, replica_id=name)


def pool(shared: RedisLoadBook, **config: object) -> Pool:
    document = {"urls": URLS, "capacity": 11, "saturation": {"max_starting": 4}, **config}
    return Pool("colo", PoolConfig.model_validate(document), book=shared)


async def test_two_books_see_each_others_in_flight_starting_and_held(
    redis_server: RedisServer,
) -> None:
    a, b = book(redis_server.url, "a"), book(redis_server.url, "b")
    one, two = pool(a), pool(b)
    try:
        for _ in range(6):
            one.take(prompt_tokens=100, tenant="loud", exclude=[one.replicas[1]])
        two.take(prompt_tokens=50, starting=True, tenant="quiet", exclude=[two.replicas[0]])
        await a.exchange()
        await b.exchange()
        await a.exchange()
        seen_by_a, seen_by_b = one.load(), two.load()
        assert (seen_by_a.in_flight, seen_by_a.prompt_tokens, seen_by_a.starting) == (7, 650, 1)
        assert (seen_by_b.in_flight, seen_by_b.prompt_tokens, seen_by_b.starting) == (7, 650, 1)
        assert [r.outstanding for r in seen_by_b.replicas] == [6, 1]  # per replica, by label
        assert a.snapshot([one], tenant="quiet").tenant_held == 1  # b's place, seen from a
        quiet = b.snapshot([two], tenant="quiet")
        assert (quiet.tenant_held, quiet.most_held) == (1, 6)  # a's loud tenant holds the most
        assert quiet.held_back((1, 1)) == (0, 0)
        assert b.snapshot([two], tenant="loud").held_back((1, 1)) == (1, 1)
        for _ in range(4):
            one.take(tenant="loud")
        assert one.saturation() == "in_flight"  # 10 here and 1 there reach 11
    finally:
        await a.aclose()
        await b.aclose()


async def test_prefix_hints_reach_the_other_book(redis_server: RedisServer) -> None:
    a, b = book(redis_server.url, "a"), book(redis_server.url, "b")
    one, two = pool(a), pool(b)
    payload = {"messages": [{"role": "user", "content": "a long shared system prompt " * 20}]}
    blocks = prompt_blocks(
        Operation.CHAT, payload, block_chars=64, max_blocks=64, seed=b"m", stable=True
    )
    again = prompt_blocks(
        Operation.CHAT, payload, block_chars=64, max_blocks=64, seed=b"m", stable=True
    )
    assert blocks.hashes == again.hashes and len(blocks.hashes) >= 8  # the same in any process
    try:
        one.give_back(one.take(blocks=blocks, exclude=[one.replicas[0]]))  # sent to r1 via a
        await a.exchange()
        await b.exchange()
        match = b.match(two, blocks)
        assert match.pool_blocks == len(blocks.hashes)
        assert match.replica_blocks == (0, len(blocks.hashes))  # b knows r1 holds it
        await a.exchange()
        assert a.match(one, blocks).replica_blocks == (0, len(blocks.hashes))  # not doubled
    finally:
        await a.aclose()
        await b.aclose()


async def test_a_change_is_sent_at_once_not_at_the_next_interval(
    redis_server: RedisServer,
) -> None:
    a = book(redis_server.url, "a", interval_seconds=30, max_age_seconds=60)
    b = book(redis_server.url, "b", interval_seconds=30, max_age_seconds=60)
    one, two = pool(a), pool(b)
    await a.start()
    await b.start()
    try:
        async with asyncio.timeout(10):
            while a.exchanges < 1 or b.exchanges < 1:  # each started with one exchange
                await asyncio.sleep(0.01)
        one.take(starting=True)
        async with asyncio.timeout(10):
            while True:
                await b.exchange()  # b reads (its own task would, within 30 s only)
                if two.load().starting == 1:
                    break
                await asyncio.sleep(0.01)
    finally:
        await a.aclose()
        await b.aclose()


async def test_a_book_gone_quiet_stops_counting_after_max_age(redis_server: RedisServer) -> None:
    a = book(redis_server.url, "a", interval_seconds=0.01, max_age_seconds=0.05)
    b = book(redis_server.url, "b", interval_seconds=0.01, max_age_seconds=0.05)
    one, two = pool(a), pool(b)
    try:
        two.take()
        await b.exchange()
        await a.exchange()
        assert one.load().in_flight == 1  # b's request counts while b's entry is fresh
        # b says nothing from now on: once its entry is older than max_age (Redis's own clock,
        # so polled, with a generous deadline), it no longer counts.
        async with asyncio.timeout(30):
            while one.load().in_flight != 0:
                await asyncio.sleep(0.02)
                await a.exchange()
    finally:
        await a.aclose()
        await b.aclose()


async def test_an_unreachable_redis_leaves_the_own_view() -> None:
    lost = book("redis://127.0.0.1:1/0", "lost", timeout_seconds=0.2)
    one = pool(lost)
    one.take()
    lost._pools["colo"].others.in_flight = 5
    await lost.exchange()
    assert one.load().in_flight == 1
    await lost.aclose()


async def test_a_place_freed_on_another_book_tells_the_subscribers(
    redis_server: RedisServer,
) -> None:
    """Another gateway's give-back reaches this one through the exchange: its flow queue is
    told then, as on a give-back of its own (or a request waiting here would wait for the
    recheck timer)."""
    a, b = book(redis_server.url, "a"), book(redis_server.url, "b")
    one, two = pool(a), pool(b)
    told: list[int] = []
    a.subscribe(lambda: told.append(one.load().in_flight))
    try:
        hold = two.take(tenant="loud")
        await b.exchange()
        await a.exchange()
        assert told == [] and one.load().in_flight == 1
        two.give_back(hold)
        await b.exchange()
        await a.exchange()
        assert told == [0]
        await a.exchange()
        assert told == [0]  # nothing freed since
    finally:
        await a.aclose()
        await b.aclose()


async def test_the_canary_judge_shares_the_load_books_one_client() -> None:
    """One Redis client for routing's shared state, configured in ``load_sharing`` alone."""
    from gateway.config import parse_config
    from gateway.metrics import GatewayMetrics
    from gateway.routing.metrics import RoutingMetrics
    from gateway.runtime.state import build_canaries, build_load_book

    variants = {
        "stable": {"weight": 90, "pools": {"colocated": "a"}},
        "canary": {"weight": 10, "pools": {"colocated": "b"}},
    }
    config = parse_config(
        {
            "load_sharing": {"backend": "redis", "redis_url": "redis://127.0.0.1:1/0"},
            "pools": {"a": {"urls": ["http://127.0.0.1:1"]}, "b": {"urls": ["http://127.0.0.1:2"]}},
            "models": {"m": {"variants": variants, "canary": {"baseline": "stable"}}},
        }
    )
    shared = build_load_book(config)
    assert isinstance(shared, RedisLoadBook)
    canaries = build_canaries(config, RoutingMetrics(GatewayMetrics()), book=shared)
    assert canaries.shared and canaries._redis is shared.redis  # type: ignore[attr-defined]
    await canaries.aclose()  # leaves the book's client open
    assert shared.redis.connection_pool is not None
    await shared.aclose()


async def test_two_gateways_claiming_the_last_start_at_once_get_it_once(
    redis_server: RedisServer,
) -> None:
    """The bounding figures are claimed atomically: with one start left, of two claims sent at
    the same moment from two books, exactly one is granted (periodic figures would grant both)."""
    a, b = book(redis_server.url, "a"), book(redis_server.url, "b")
    one, two = pool(a, saturation={"max_starting": 2}), pool(b, saturation={"max_starting": 2})
    claim = {"tenant": "t", "starting": True, "prompt_tokens": 10, "reserve": (0, 0)}
    try:
        assert await a.claim(one, **claim)  # type: ignore[arg-type]
        one.take(starting=True, tenant="t")  # the granted request takes its replica at once
        granted = await asyncio.gather(a.claim(one, **claim), b.claim(two, **claim))  # type: ignore[arg-type]
        assert sorted(granted) == [False, True]
        if not granted[1]:  # b was refused: its view took a's figures, its claim included
            assert two.load().starting == 2
    finally:
        await a.aclose()
        await b.aclose()


async def test_a_claim_keeps_the_reserve_from_the_tenant_holding_the_most(
    redis_server: RedisServer,
) -> None:
    a, b = book(redis_server.url, "a"), book(redis_server.url, "b")
    one, two = pool(a, capacity=4), pool(b, capacity=4)
    claim = {"starting": False, "prompt_tokens": 0, "reserve": (1, 0)}
    try:
        for _ in range(2):
            one.take(tenant="loud")
        await a.exchange()
        assert await b.claim(two, tenant="loud", **claim)  # type: ignore[arg-type]  # 3rd place
        two.take(tenant="loud")
        # 3 of 4 places held by loud, every gateway's: the last is kept from it, not from quiet.
        assert not await b.claim(two, tenant="loud", **claim)  # type: ignore[arg-type]
        assert not await a.claim(one, tenant="loud", **claim)  # type: ignore[arg-type]
        assert await a.claim(one, tenant="quiet", **claim)  # type: ignore[arg-type]
    finally:
        await a.aclose()
        await b.aclose()


async def test_a_claim_with_redis_away_falls_back_to_the_own_room_check() -> None:
    lost = book("redis://127.0.0.1:1/0", "lost", timeout_seconds=0.2)
    one = pool(lost)
    claim = {"tenant": "t", "starting": True, "prompt_tokens": 0, "reserve": (0, 0)}
    assert await lost.claim(one, **claim)  # type: ignore[arg-type]
    await lost.aclose()
