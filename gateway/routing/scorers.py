"""Replica scorers as named plugins: each a small function of (the pool's snapshot, a replica's).

A scorer rates one candidate replica of a pool from 0 to 1 from a frozen view of the pool for this
request (:class:`PoolView`: the candidates, their load, the prompt's prefix blocks) and of the
replica (:class:`ReplicaView`: its outstanding requests, its engine's fresh reading, the prefix
blocks it probably holds, what it delivered lately through the outcome feed). The replica with
the highest weighted sum wins (``gateway.routing.policy.best_replica``). Weights are per model,
from config (``routing.scorers: {prefix: 2, queue: 1, kv_usage: 1}``; a name left out keeps its
default, a weight of 0 turns it off, an unknown name is refused when the config loads).

A new scorer is one module and one registration, before the config is loaded::

    # gateway/routing/scorers_latency.py (or a plugin package's module)
    def fast_first_token(pool: PoolView, replica: ReplicaView) -> float:
        figures = replica.outcomes
        return 0.5 if figures is None or figures.ttft is None else 1.0 / (1.0 + figures.ttft)

    register_scorer("ttft", fast_first_token)          # then routing.scorers: {ttft: 1}

Scorers read; they own nothing (the load and the outcome figures belong to the pool's books).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

from gateway.routing.gauges import EngineReading
from gateway.routing.outcomes import ReplicaFigures


@dataclass(frozen=True, slots=True)
class ReplicaView:
    """One candidate replica as the scorers see it for one request."""

    index: int
    """Its position in the pool (the prefix index's numbering)."""
    label: str
    outstanding: int
    """Requests this gateway has in flight on it."""
    engine: EngineReading | None
    """Its engine's reading while fresh, else None (a scorer must not guess from a stale one)."""
    prefix_blocks: int
    """Blocks of the prompt it probably holds (the prefix index)."""
    outcomes: ReplicaFigures | None
    """What it delivered lately (the outcome feed); None before its first settled exchange."""

    @property
    def load(self) -> float:
        """Requests on the replica: this gateway's outstanding plus its engine's waiting."""
        return self.outstanding + (0.0 if self.engine is None else self.engine.waiting)


@dataclass(frozen=True, slots=True)
class PoolView:
    """The pool for one request: its candidates (available, not excluded, in rotation order)."""

    name: str
    candidates: tuple[ReplicaView, ...]
    total_blocks: int
    """The prompt's blocks (0: the prefix index is off, or the prompt has none)."""
    top_load: float
    """The highest ``load`` among the candidates."""


Scorer = Callable[[PoolView, ReplicaView], float]
"""``score(pool, replica)``: 0 (worst) to 1 (best)."""

_SCORERS: dict[str, Scorer] = {}

DEFAULT_WEIGHTS: Mapping[str, float] = {"prefix": 2.0, "queue": 1.0, "kv_usage": 1.0}
"""The weights of a model that names no scorer (and of each built-in one a model leaves out)."""


def register_scorer(name: str, scorer: Scorer) -> Scorer:
    """Make ``scorer`` available to config as ``routing.scorers: {name: weight}``."""
    if name in _SCORERS and _SCORERS[name] is not scorer:
        raise ValueError(f"a scorer named {name!r} is registered already")
    _SCORERS[name] = scorer
    return scorer


def scorer(name: str) -> Scorer:
    return _SCORERS[name]


def scorer_names() -> tuple[str, ...]:
    return tuple(_SCORERS)


def prefix(pool: PoolView, replica: ReplicaView) -> float:
    """The share of the prompt's blocks the replica probably holds."""
    return replica.prefix_blocks / pool.total_blocks if pool.total_blocks else 0.0


def queue(pool: PoolView, replica: ReplicaView) -> float:
    """``1 - load / the candidates' highest load``: the least loaded scores 1."""
    return 1.0 - replica.load / pool.top_load if pool.top_load > 0 else 1.0


def kv_usage(pool: PoolView, replica: ReplicaView) -> float:
    """``1 - the engine's KV cache usage``; unknown: 0.5 for every replica (decides nothing)."""
    engine = replica.engine
    if engine is None or engine.kv_usage is None:
        return 0.5
    return 1.0 - min(1.0, max(0.0, engine.kv_usage))


register_scorer("prefix", prefix)
register_scorer("queue", queue)
register_scorer("kv_usage", kv_usage)
