"""Saturation filters and replica scorers (gateway/routing/policy.py), through real pools."""

from __future__ import annotations

from gateway.routing.config import PoolConfig, ScorerWeights
from gateway.routing.gauges import EngineReading
from gateway.routing.load import Others
from gateway.routing.policy import NO_SCORES, ReplicaScores
from gateway.routing.pools import Pool

NOW = [0.0]


def clock() -> float:
    return NOW[0]


def pool(replicas: int = 2, **config: object) -> Pool:
    urls = tuple(f"http://r{i}:8000" for i in range(replicas))
    document = {"urls": urls, "signals": {"replica_metrics": True, "max_age": 2.0}, **config}
    return Pool("p", PoolConfig.model_validate(document), clock)


def reading(running: float = 0, waiting: float = 0, kv: float | None = None) -> EngineReading:
    return EngineReading(running, waiting, kv, 0, 0, series=3)


def test_saturation_by_each_bound_and_only_fresh_engine_gauges_count() -> None:
    NOW[0] = 0.0
    p = pool(
        capacity=2,
        saturation={"max_waiting": 4, "max_kv_usage": 0.9, "max_prompt_tokens_in_flight": 1000},
    )
    assert p.saturation() is None
    p.book.engine(p.name).put(reading(waiting=5))
    assert p.saturation() == "waiting"
    p.book.engine(p.name).put(reading(kv=0.95))
    assert p.saturation() == "kv_usage"
    NOW[0] = 10.0  # stale: the gateway's own view decides
    assert p.saturation() is None
    first = p.take(prompt_tokens=600)
    assert p.saturation() is None
    assert p.saturation(pending=1) == "in_flight"  # one granted request about to arrive
    second = p.take(prompt_tokens=600)
    assert p.saturation() == "in_flight"
    p.give_back(first)
    p.give_back(second)
    big = p.take(prompt_tokens=1200)
    assert p.saturation() == "prompt_tokens"
    p.give_back(big)
    assert (p.load().in_flight, p.load().prompt_tokens) == (0, 0)


def test_streamed_requests_count_as_starting_until_their_first_token() -> None:
    p = pool(capacity=8, saturation={"max_starting": 1})
    first = p.take(starting=True)
    assert p.saturation() == "starting"  # its engine has not taken it into the batch yet
    p.book.first_token(first)
    assert p.saturation() is None  # still in flight, no longer starting
    assert p.saturation(pending=1) == "starting"  # a granted one about to start fills it
    second = p.take(starting=True)
    p.give_back(second)  # ended before its first token: counted off once
    p.give_back(first)
    assert (p.in_flight, p.load().starting) == (0, 0)
    whole = p.take()  # a non-streamed request's first token is never seen: not counted
    assert p.saturation() is None
    p.give_back(whole)


def test_other_gateways_in_flight_count_towards_capacity() -> None:
    p = pool(capacity=3)
    p.book._pools[p.name].others = Others(in_flight=3, prompt_tokens=0)
    assert p.saturation() == "in_flight"


def test_no_scorer_keeps_least_outstanding_with_rotation() -> None:
    p = pool(3)
    chosen = [p.take(scores=NO_SCORES) for _ in range(3)]
    assert len({hold.replica.url for hold in chosen}) == 3


def test_prefix_affinity_wins_over_a_little_load() -> None:
    NOW[0] = 0.0
    p = pool(2)
    p.take(exclude=[p.replicas[0]])  # one request on replica 1
    scores = ReplicaScores(ScorerWeights(), prefix_blocks=(0, 10), total_blocks=10)
    assert p.choose(scores=scores) is p.replicas[1]


def test_load_wins_when_the_prefix_holder_is_the_busiest_and_fullest() -> None:
    NOW[0] = 0.0
    p = pool(2)
    for _ in range(4):
        p.take(exclude=[p.replicas[0]])
    p.book.engine(p.name, p.replicas[1].label).put(reading(waiting=6, kv=1.0))
    p.book.engine(p.name, p.replicas[0].label).put(reading(kv=0.0))
    scores = ReplicaScores(ScorerWeights(), prefix_blocks=(0, 5), total_blocks=10)
    assert p.choose(scores=scores) is p.replicas[0]


def test_equal_scores_spread_by_rotation() -> None:
    p = pool(2)
    scores = ReplicaScores(ScorerWeights())
    picks = {p.choose(scores=scores).url for _ in range(4)}
    assert len(picks) == 2
