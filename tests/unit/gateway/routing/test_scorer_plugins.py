"""Scorers are named plugins (gateway/routing/scorers.py): a new one is one function plus its
registration, named in config like the built-in ones; the outcome feed's figures reach it."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from gateway.routing.config import PoolConfig, RoutingPolicy, ScorerWeights
from gateway.routing.outcomes import ReplicaOutcome
from gateway.routing.policy import ReplicaScores
from gateway.routing.pools import Pool
from gateway.routing.scorers import PoolView, ReplicaView, register_scorer


def last_replica(pool: PoolView, replica: ReplicaView) -> float:
    """The toy scorer: the replica with the highest position in its pool."""
    return replica.index / max(1, len(pool.candidates) - 1)


def fast_first_token(pool: PoolView, replica: ReplicaView) -> float:
    """What issue 38's scorer will do with a model: the lowest recent TTFT wins."""
    figures = replica.outcomes
    return 0.5 if figures is None or figures.ttft is None else 1.0 / (1.0 + figures.ttft)


register_scorer("last_replica", last_replica)
register_scorer("fast_first_token", fast_first_token)


def pool(replicas: int = 3) -> Pool:
    urls = tuple(f"http://r{i}:8000" for i in range(replicas))
    return Pool("p", PoolConfig(urls=urls))


def test_a_registered_scorer_is_named_in_config_and_decides() -> None:
    policy = RoutingPolicy.model_validate({"scorers": {"last_replica": 5, "queue": 0}})
    assert policy.scorers.active == (("prefix", 2.0), ("kv_usage", 1.0), ("last_replica", 5.0))
    p = pool()
    picks = {p.choose(scores=ReplicaScores(policy.scorers)).url for _ in range(6)}
    assert picks == {"http://r2:8000"}  # rotation would have spread them


def test_the_default_weights_and_the_old_form_keep_working() -> None:
    assert ScorerWeights().active == (("prefix", 2.0), ("queue", 1.0), ("kv_usage", 1.0))
    given = RoutingPolicy.model_validate({"scorers": {"prefix": 2, "queue": 1, "kv_usage": 1}})
    assert given.scorers == ScorerWeights()
    assert ScorerWeights(prefix=0, queue=0, kv_usage=0).active == ()


def test_an_unregistered_scorer_or_a_bad_weight_is_refused_when_the_config_loads() -> None:
    with pytest.raises(ValidationError, match="did you mean 'last_replica'"):
        RoutingPolicy.model_validate({"scorers": {"last_replika": 1}})
    with pytest.raises(ValidationError, match="weight is a number >= 0"):
        RoutingPolicy.model_validate({"scorers": {"last_replica": -1}})


def test_the_outcome_feed_reaches_a_scorer_through_the_pool_book() -> None:
    p = pool(2)
    slow, fast = p.replicas
    for replica, ttft in ((slow, 2.0), (fast, 0.1)):
        p.outcomes.observe(ReplicaOutcome("m", "p", replica.label, 100, 50, ttft, 0.01, False))
    weights = ScorerWeights.model_validate({"fast_first_token": 1, "queue": 0, "kv_usage": 0})
    picks = {p.choose(scores=ReplicaScores(weights)).url for _ in range(4)}
    assert picks == {fast.url}
    figures = p.outcomes.figures(fast.label)
    assert figures is not None and figures.cached_share == 0.5 and figures.exchanges == 1
