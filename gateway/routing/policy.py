"""Routing policy as small named filters and scorers; they read load, they own none of it.

A filter says whether a pool is saturated, and by which bound (``saturation``): the gateway's own
count of requests and prompt tokens in flight and of streamed requests still waiting for their
first token (always there), the engines' waiting queue and KV
usage (their vLLM gauges, only while fresh). A scorer rates one replica of a pool from 0 to 1;
the replica with the highest weighted sum is chosen (``best_replica``), ties going to the next in
rotation::

    scores = ReplicaScores(weights, match.replica_blocks, len(match.blocks.hashes))
    replica = best_replica(pool.replicas, start, exclude=(), scores=scores)

The scorers, each 0 to 1:

- ``prefix``: the share of the prompt's blocks the replica probably holds (the prefix index);
- ``queue``: ``1 - load / max load`` over the candidates, load being the requests this gateway
  has outstanding on the replica plus those its engine says are waiting (when fresh);
- ``kv_usage``: ``1 - the engine's KV cache usage`` (when fresh; else the same for all).

With the default weights (prefix 2, queue 1, kv_usage 1) a replica holding the whole prefix wins
unless it is both the busiest and the fullest, the point where Dynamo's cost (prefill blocks
against decode blocks, weighted 1:1) also gives up on overlap. See README, "Serving-aware routing".
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from typing import Protocol, TypeVar

from gateway.routing.config import PoolConfig, ScorerWeights
from gateway.routing.gauges import EngineGauges, EngineReading

IN_FLIGHT = "in_flight"
WAITING = "waiting"
KV_USAGE = "kv_usage"
PROMPT_TOKENS = "prompt_tokens"
STARTING = "starting"
SATURATION_REASONS = (IN_FLIGHT, STARTING, WAITING, KV_USAGE, PROMPT_TOKENS)


def saturation(
    config: PoolConfig,
    in_flight: int,
    prompt_tokens: int,
    engine: EngineReading | None,
    starting: int = 0,
    held_back: tuple[int, int] = (0, 0),
) -> str | None:
    """The first bound the pool is past, or None. Engine bounds count only with a fresh
    reading: a stale or missing one leaves the gateway's own view (never an error).
    ``starting``: streamed requests sent whose first token has not come back. ``held_back``:
    places and starts of ``capacity`` and ``max_starting`` this request may not use (flow
    control's reserve, kept from the tenant holding the most)."""
    places, starts = held_back
    if config.capacity is not None and in_flight + places >= config.capacity:
        return IN_FLIGHT
    bounds = config.saturation
    if bounds.max_starting is not None and starting + starts >= bounds.max_starting:
        return STARTING
    limit = bounds.max_prompt_tokens_in_flight
    if limit is not None and prompt_tokens >= limit:
        return PROMPT_TOKENS
    if engine is not None:
        if bounds.max_waiting is not None and engine.waiting > bounds.max_waiting:
            return WAITING
        kv = engine.kv_usage
        if bounds.max_kv_usage is not None and kv is not None and kv >= bounds.max_kv_usage:
            return KV_USAGE
    return None


class ReplicaLike(Protocol):
    @property
    def available(self) -> bool: ...

    @property
    def outstanding(self) -> int: ...

    @property
    def gauges(self) -> EngineGauges | None: ...


class ReplicaScores:
    """What the scorers need of one request: the weights, and the prefix blocks each replica
    (by position in its pool) probably holds out of the prompt's."""

    __slots__ = ("prefix_blocks", "total_blocks", "weights")

    def __init__(
        self, weights: ScorerWeights, prefix_blocks: Sequence[int] = (), total_blocks: int = 0
    ) -> None:
        self.weights = weights
        self.prefix_blocks = prefix_blocks
        self.total_blocks = total_blocks


NO_SCORES = ReplicaScores(ScorerWeights(prefix=0, queue=0, kv_usage=0))


R = TypeVar("R", bound="ReplicaLike")


def best_replica(
    replicas: Sequence[R], start: int, exclude: Collection[R], scores: ReplicaScores
) -> R | None:
    """The available replica, not excluded, with the best weighted score; from ``start`` on
    in rotation, so equal scores spread. No scorer on: the fewest outstanding."""
    count = len(replicas)
    order = [replicas[(start + i) % count] for i in range(count)]
    candidates = [r for r in order if r.available and r not in exclude]
    if not candidates:
        return None
    weights = scores.weights
    if not (weights.prefix or weights.queue or weights.kv_usage) or len(candidates) == 1:
        return min(candidates, key=_outstanding)  # min keeps the first of equals
    loads = [_load(r) for r in candidates]
    top = max(loads)
    best: R | None = None
    best_score = -1.0
    for replica, load in zip(candidates, loads, strict=True):
        score = 0.0
        if weights.prefix and scores.total_blocks:
            held = scores.prefix_blocks[replicas.index(replica)] if scores.prefix_blocks else 0
            score += weights.prefix * held / scores.total_blocks
        if weights.queue:
            score += weights.queue * (1.0 - load / top if top > 0 else 1.0)
        if weights.kv_usage:
            score += weights.kv_usage * (1.0 - _kv(replica))
        if score > best_score:
            best, best_score = replica, score
    return best


def _outstanding(replica: ReplicaLike) -> int:
    return replica.outstanding


def _load(replica: ReplicaLike) -> float:
    """Requests on the replica: this gateway's outstanding, plus the engine's waiting queue."""
    gauges = replica.gauges
    reading = None if gauges is None else gauges.fresh()
    return replica.outstanding + (0.0 if reading is None else reading.waiting)


def _kv(replica: ReplicaLike) -> float:
    gauges = replica.gauges
    reading = None if gauges is None else gauges.fresh()
    if reading is None or reading.kv_usage is None:
        return 0.5  # unknown: the same for every replica, so it decides nothing
    return min(1.0, max(0.0, reading.kv_usage))
