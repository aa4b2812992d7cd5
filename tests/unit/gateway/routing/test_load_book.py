"""The load book (gateway/routing/load.py): the one owner of every load figure, and its frozen
snapshots, which flow control's room check and dispatch's first choice both read."""

from __future__ import annotations

import random

import pytest

from configkit import ConfigError
from gateway.config import parse_config
from gateway.flow.gate import RoomCheck
from gateway.routing.attempts import Attempts
from gateway.routing.config import PoolConfig, ScorerWeights, VariantConfig, VariantPools
from gateway.routing.gauges import EngineReading
from gateway.routing.load import Hold, LocalLoadBook
from gateway.routing.load_config import LoadSharingConfig
from gateway.routing.policy import NO_SCORES
from gateway.routing.pools import Pool
from gateway.routing.prefix import PromptBlocks
from gateway.routing.router import RoutePlan, Variant

NOW = [0.0]


def clock() -> float:
    return NOW[0]


def make(book: LocalLoadBook, name: str = "colo", replicas: int = 2, **config: object) -> Pool:
    urls = tuple(f"http://r{i}:8000" for i in range(replicas))
    document = {"urls": urls, "signals": {"replica_metrics": True, "max_age": 2.0}, **config}
    return Pool(name, PoolConfig.model_validate(document), clock, book=book)


def plan_of(*pools: Pool) -> RoutePlan:
    config = VariantConfig(weight=1, pools=VariantPools(colocated=pools[0].name))
    variant = Variant("stable", config, {p.name: p for p in pools}, 60.0, None)
    return RoutePlan("m", variant, tuple((p, "prompt_short") for p in pools))


def test_take_first_token_and_give_back_move_every_figure_once() -> None:
    book = LocalLoadBook(clock)
    pool = make(book)
    hold = pool.take(prompt_tokens=300, starting=True, tenant="a")
    load = pool.load()
    assert (load.in_flight, load.starting, load.prompt_tokens) == (1, 1, 300)
    assert sum(r.outstanding for r in load.replicas) == 1
    assert book.held == {"a": 1}
    book.first_token(hold)
    book.first_token(hold)  # later chunks change nothing
    assert (pool.load().starting, pool.load().in_flight) == (0, 1)
    book.give_back(hold)
    book.give_back(hold)  # a second give-back counts nothing
    book.first_token(hold)  # nor does a first token after it
    load = pool.load()
    assert (load.in_flight, load.starting, load.prompt_tokens) == (0, 0, 0)
    assert book.held == {}


def test_a_request_given_back_before_its_first_token_stops_starting() -> None:
    book = LocalLoadBook(clock)
    pool = make(book)
    pool.give_back(pool.take(starting=True))
    assert pool.load().starting == 0


def test_a_snapshot_is_frozen_while_the_book_moves_on() -> None:
    book = LocalLoadBook(clock)
    pool = make(book, capacity=1)
    before = book.snapshot([pool], tenant="a")
    pool.take(tenant="a")
    assert before.pool("colo").in_flight == 0 and before.tenant_held == 0
    assert before.pool("colo").saturation(pool.config) is None
    after = book.snapshot([pool], tenant="a")
    assert after.pool("colo").in_flight == 1 and after.tenant_held == 1
    assert after.pool("colo").saturation(pool.config) == "in_flight"


def test_the_most_held_follows_every_take_and_give_back() -> None:
    book = LocalLoadBook(clock)
    pool = make(book, replicas=1)
    rng = random.Random(35)
    holds: list[Hold] = []
    for _ in range(2000):
        if holds and rng.random() < 0.5:
            book.give_back(holds.pop(rng.randrange(len(holds))))
        else:
            holds.append(pool.take(tenant=rng.choice("abcd")))
        assert book.most == max(book.held.values(), default=0)
        assert sum(book.held.values()) == len(holds)
    for hold in holds:
        book.give_back(hold)
    assert book.held == {} and book.most == 0


def test_the_reserve_is_held_back_from_the_tenant_holding_the_most_only() -> None:
    book = LocalLoadBook(clock)
    pool = make(book, replicas=1)
    for _ in range(3):
        pool.take(tenant="loud")
    pool.take(tenant="quiet")
    loud = book.snapshot([pool], tenant="loud")
    quiet = book.snapshot([pool], tenant="quiet")
    nobody = book.snapshot([pool], tenant="new")
    assert (loud.tenant_held, loud.most_held) == (3, 3)
    assert loud.held_back((1, 1)) == (1, 1)
    assert quiet.held_back((1, 1)) == (0, 0) and nobody.held_back((1, 1)) == (0, 0)


def test_subscribers_are_told_when_a_place_frees() -> None:
    book = LocalLoadBook(clock)
    pool = make(book)
    told: list[int] = []
    book.subscribe(lambda: told.append(pool.load().in_flight))
    hold = pool.take(starting=True)
    assert told == []  # a take frees nothing
    book.first_token(hold)
    book.give_back(hold)
    assert told == [1, 0]


def test_engine_readings_and_their_age_are_in_the_snapshot_while_fresh() -> None:
    NOW[0] = 100.0
    book = LocalLoadBook(clock)
    pool = make(book)
    book.engine("colo").put(EngineReading(2, 5, 0.5, 0, 0, series=1))
    book.engine("colo", pool.replicas[1].label).put(EngineReading(1, 3, 0.9, 0, 0, series=1))
    NOW[0] = 101.0
    load = pool.load()
    assert load.engine is not None and load.engine.waiting == 5 and load.engine_age == 1.0
    assert load.replicas[0].engine is None and load.replicas[1].engine is not None
    NOW[0] = 110.0  # stale: the gateway's own view decides
    load = pool.load()
    assert load.engine is None and load.engine_age == 10.0 and load.replicas[1].engine is None


def test_the_prefix_match_is_the_books_index_and_rides_in_the_snapshot() -> None:
    book = LocalLoadBook(clock)
    pool = make(book)
    blocks = PromptBlocks((11, 12, 13), 192, 64)
    book.give_back(pool.take(blocks=blocks, exclude=[pool.replicas[0]]))
    match = book.match(pool, blocks)
    assert match.pool_blocks == 3 and match.replica_blocks == (0, 3)
    snapshot = book.snapshot([pool], matches={"colo": match})
    assert snapshot.pool("colo").match is match
    assert book.index_size(pool) == 3


def test_a_pool_rebuilt_by_a_reload_keeps_the_requests_in_flight_on_its_replicas() -> None:
    book = LocalLoadBook(clock)
    old = make(book, replicas=2)
    kept = old.take(exclude=[old.replicas[1]], prompt_tokens=10)  # on r0
    gone = old.take(exclude=[old.replicas[0]], prompt_tokens=20)  # on r1
    new = Pool("colo", PoolConfig(urls=("http://r0:8000",), capacity=5), clock, book=book)
    assert new.load().in_flight == 2  # r1's request still counts, though r1 left the pool
    assert [r.outstanding for r in new.load().replicas] == [1]
    book.give_back(gone)
    book.give_back(kept)
    assert new.load().in_flight == 0 and new.load().prompt_tokens == 0


def test_dispatchs_first_choice_reads_the_snapshot_the_gate_admitted_on() -> None:
    """The gate found room on a snapshot; dispatch's first choice reads that same one, not the
    book's figures a moment later (a retry reads a fresh one)."""
    book = LocalLoadBook(clock)
    pool = make(book, replicas=2, capacity=5)
    pool.take(exclude=[pool.replicas[0]])  # r1 holds one
    plan = plan_of(pool)
    room = RoomCheck(plan)
    assert room({}) == "colo" and room.load is not None
    for _ in range(2):
        pool.take(exclude=[pool.replicas[1]])  # meanwhile r0 got busier
    with Attempts() as attempts:
        on_gates = attempts.take(pool, (), "stable", "x", None, room.load.pool("colo"))
    with Attempts() as attempts:
        on_now = attempts.take(pool, (), "stable", "x")
    assert on_gates is pool.replicas[0]  # r0 was the least loaded on the gate's snapshot
    assert on_now is pool.replicas[1]
    assert NO_SCORES.weights == ScorerWeights(prefix=0, queue=0, kv_usage=0)


def test_load_sharing_config_is_its_own_section_and_checked() -> None:
    assert LoadSharingConfig().backend == "local"
    config = LoadSharingConfig(backend="redis", redis_url="redis://127.0.0.1:6379/0")
    assert config.interval_seconds == 0.1 and config.max_hints == 4096
    with pytest.raises(ValueError, match="redis_url: required"):
        LoadSharingConfig(backend="redis")
    with pytest.raises(ValueError, match="longer than interval_seconds"):
        LoadSharingConfig(interval_seconds=2.0, max_age_seconds=1.0)
    document = {
        "pools": {"p": {"urls": ["http://127.0.0.1:1"]}},
        "models": {"m": {"pool": "p"}},
        "load_sharing": {"backend": "redis", "redis_url": "redis://h:1/0", "intervall": 1},
    }
    with pytest.raises(ConfigError, match="intervall"):
        parse_config(document)
    limits_only = {
        "pools": {"p": {"urls": ["http://127.0.0.1:1"]}},
        "models": {"m": {"pool": "p"}},
        "limits": {"backend": "redis", "redis_url": "redis://h:1/0"},
    }
    assert parse_config(limits_only).load_sharing.backend == "local"  # not switched on by limits


def test_a_reload_that_turns_replica_readings_on_gets_them() -> None:
    book = LocalLoadBook(clock)
    urls = ("http://r0:8000",)
    Pool("colo", PoolConfig(urls=urls), clock, book=book)
    assert not book.has_replica_gauges("colo", "http://r0:8000")
    on = PoolConfig.model_validate({"urls": urls, "signals": {"replica_metrics": True}})
    Pool("colo", on, clock, book=book)
    assert book.has_replica_gauges("colo", "http://r0:8000")
