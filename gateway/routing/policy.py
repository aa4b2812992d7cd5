"""Routing policy as small named filters and scorers; they read load, they own none of it.

Filters and scorers are named plugins (gateway/routing/filters.py, gateway/routing/scorers.py:
each registry, what its plugins read, how to add one). A filter says whether a pool is
saturated, and by which bound (``saturation``): the gateway's own
count of requests and prompt tokens in flight and of streamed requests still waiting for their
first token (always there), the engines' waiting queue and KV
usage (their vLLM gauges, only while fresh). A scorer rates one replica of a pool from 0 to 1;
the replica with the highest weighted sum is chosen (``best_replica``), ties going to the next in
rotation::

    scores = ReplicaScores(weights, match.replica_blocks, len(match.blocks.hashes))
    replica = best_replica(pool.replicas, start, (), scores, snapshot.pool(pool.name))

The scorers are named plugins (gateway/routing/scorers.py: the registry, the views they read,
how to add one); the built-in ones, each 0 to 1:

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
from typing import TYPE_CHECKING, Protocol, TypeVar

from gateway.routing.config import PoolConfig, ScorerWeights
from gateway.routing.filters import PoolLoad, filter_names, filters
from gateway.routing.gauges import EngineReading
from gateway.routing.outcomes import OutcomeBook
from gateway.routing.scorers import PoolView, ReplicaView, scorer

if TYPE_CHECKING:
    from gateway.routing.load import PoolSnapshot, ReplicaLoad

IN_FLIGHT = "in_flight"
WAITING = "waiting"
KV_USAGE = "kv_usage"
PROMPT_TOKENS = "prompt_tokens"
STARTING = "starting"
SATURATION_REASONS = filter_names()
"""Every reason a pool may be saturated for: the registered filters' names."""


def saturation(
    config: PoolConfig,
    in_flight: int,
    prompt_tokens: int,
    engine: EngineReading | None,
    starting: int = 0,
    held_back: tuple[int, int] = (0, 0),
) -> str | None:
    """The name of the first registered filter (gateway/routing/filters.py) the pool is past,
    or None. Engine bounds count only with a fresh reading: a stale or missing one leaves the
    gateway's own view (never an error). ``starting``: streamed requests sent whose first token
    has not come back. ``held_back``: places and starts of ``capacity`` and ``max_starting``
    this request may not use (flow control's reserve, kept from the tenant holding the most)."""
    load = PoolLoad(in_flight, prompt_tokens, engine, starting, held_back)
    for name, past in filters():
        if past(config, load):
            return name
    return None


class ReplicaLike(Protocol):
    @property
    def available(self) -> bool: ...

    @property
    def label(self) -> str: ...


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
    replicas: Sequence[R],
    start: int,
    exclude: Collection[R],
    scores: ReplicaScores,
    load: PoolSnapshot,
    outcomes: OutcomeBook | None = None,
) -> R | None:
    """The available replica, not excluded, with the best weighted score (the registered
    scorers the weights turn on, gateway/routing/scorers.py) on ``load``, the request's frozen
    snapshot of the pool (``load.replicas[i]`` is ``replicas[i]``); from ``start`` on in
    rotation, so equal scores spread. No scorer on: the fewest outstanding. ``outcomes``: the
    pool's book of what each replica delivered (the outcome feed), for the scorers that read
    it."""
    count = len(replicas)
    order = [(start + i) % count for i in range(count)]
    candidates = [i for i in order if replicas[i].available and replicas[i] not in exclude]
    if not candidates:
        return None
    figures = load.replicas
    active = scores.weights.active
    if not active or len(candidates) == 1:
        fewest = min(candidates, key=lambda i: figures[i].outstanding)  # first of equals
        return replicas[fewest]
    view = _pool_view(figures, candidates, scores, load.name, outcomes)
    best = 0
    best_score = -1.0
    plugins = [(scorer(name), weight) for name, weight in active]
    for n, replica in enumerate(view.candidates):
        score = sum(weight * plugin(view, replica) for plugin, weight in plugins)
        if score > best_score:
            best, best_score = n, score
    return replicas[candidates[best]]


def _pool_view(
    figures: Sequence[ReplicaLoad],
    candidates: Sequence[int],
    scores: ReplicaScores,
    pool: str,
    outcomes: OutcomeBook | None,
) -> PoolView:
    """The frozen view the scorers read for this one choice."""
    held = scores.prefix_blocks
    views = []
    for i in candidates:
        replica = figures[i]
        views.append(
            ReplicaView(
                i,
                replica.label,
                replica.outstanding,
                replica.engine,
                held[i] if held else 0,
                None if outcomes is None else outcomes.figures(replica.label),
            )
        )
    top = max(v.load for v in views)
    return PoolView(pool, tuple(views), scores.total_blocks, top)
