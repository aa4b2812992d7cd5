"""Per-model routing: which variant (the canary's state machine, here), then which pool.

The decision is a :class:`RoutePlan`: the variant, and its pools in the order to try them, each with
the reason it is in that place. The pool order is policy over values, in gateway/routing/order.py
(the P/D decision on the tokens a pool would prefill); this module matches the prompt against each
pool's prefix index and hands the plan what the replica scorers read. The dispatcher skips pools
that are unhealthy or saturated::

    router = ModelRouter("llama", model_config, pools)
    variant = router.choose_variant(b"key-id", forced=None)
    plan = router.plan(variant, prompt_tokens=2000, max_tokens=64, hint=None)
    plan.pools  # [(pd pool, "prompt_long"), (colocated pool, "prompt_long")]
    plan.fallback  # a canary's plan: the baseline's, tried when the canary fails first

A canary's plan carries the baseline's plan as its ``fallback`` (reason ``canary_failover``): the
dispatcher moves there when an attempt on the canary fails before the answer started. A key whose
own variant was rolled back is served by the baseline with the reason ``canary_rolled_back``.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import field

from gateway.errors import InvalidParameter
from gateway.routing.canary import SlidingWindow, WindowSummary, choose_variant, verdict
from gateway.routing.config import (
    CanaryConfig,
    ModelConfig,
    Role,
    RoutingPolicy,
    ScorerWeights,
    VariantConfig,
    VariantPools,
)
from gateway.routing.order import RouteInput, pool_order
from gateway.routing.policy import ReplicaScores
from gateway.routing.pools import Pool
from gateway.routing.predicted import PredictedRoute
from gateway.routing.prefix import NO_BLOCKS, NO_MATCH, PrefixMatch, PromptBlocks
from gateway.values import value

logger = logging.getLogger(__name__)

DEFAULT_VARIANT = "default"
"""The one variant of a model configured with a single ``pool``."""

_JUDGE_EVERY_SECONDS = 1.0  # a window summary sorts its TTFTs: not on every request

MAX_UNSENT = 10_000
FAILOVER = "canary_failover"
ROLLED_BACK = "canary_rolled_back"


@value
class Event:
    """A rollback or a re-enabling, as ``GET /admin/routing`` shows it."""

    at: float
    """Wall-clock seconds."""
    by: str
    """The gateway replica that decided (a rollback) or the admin key (a re-enabling)."""
    reason: str | None = None

    def show(self) -> dict[str, object]:
        return {"at": self.at, "by": self.by, "reason": self.reason}


class Variant:
    """One version of a model: its pools, its live weight, and its recent outcomes."""

    def __init__(
        self,
        name: str,
        config: VariantConfig,
        pools: Mapping[str, Pool],
        window: float,
        upstream_model: str | None,
    ) -> None:
        self.name = name
        self.config = config
        self.weight = config.weight
        self.rolled_back = False
        self.held_weight = config.weight
        """The weight it had when it was rolled back: whose keys it would serve."""
        self.rollback: Event | None = None
        self.rollback_applied_at: float | None = None
        """When this replica took the variant out (wall clock), whoever decided."""
        self.reenabled: Event | None = None
        self.weight_event_at: float | None = None
        """The shared operator weight this replica applied last (its wall-clock time)."""
        self.unsent: list[tuple[bool, float | None]] = []
        """Outcomes not yet pushed to the shared window (when judged from shared samples)."""
        self.upstream_model = config.upstream_model or upstream_model
        self.by_role = {
            role: pools[pool_name]
            for role in Role
            if (pool_name := getattr(config.pools, role.value)) is not None
        }
        self.window = SlidingWindow(window)


@value
class RoutePlan:
    model: str
    variant: Variant
    pools: tuple[tuple[Pool, str], ...]
    """Pools in the order to try them, each with its routing reason."""
    fallback: RoutePlan | None = field(default=None)
    """Where to go when the variant fails before the answer started: a canary's baseline."""
    prompt_tokens: int = 0
    """Counted prompt tokens (0 when nothing needed the count): the pools' own load view."""
    blocks: PromptBlocks = NO_BLOCKS
    """The prompt's block names (none unless the model's prefix index is on)."""
    matches: Mapping[str, PrefixMatch] = field(default_factory=dict, hash=False, compare=False)
    """Per pool name: what it probably holds of the prompt."""
    scorers: ScorerWeights = field(default_factory=ScorerWeights)
    predicted: PredictedRoute | None = field(default=None, hash=False, compare=False)
    """The pools' load and predictions at the choice (``routing.latency`` on), which the
    outcome teaches; None: off, or a canary's fallback plan."""

    @property
    def preferred(self) -> Pool:
        return self.pools[0][0]

    def scores(self, pool: Pool) -> ReplicaScores:
        """What the replica scorers read for ``pool``."""
        found = self.matches.get(pool.name, NO_MATCH)
        return ReplicaScores(self.scorers, found.replica_blocks, len(found.blocks.hashes))


Predict = Callable[[Mapping[Role, Pool], Mapping[str, int]], PredictedRoute]
"""``predict(pools by role, tokens each would prefill)``: the latency-predicted decision
(gateway/routing/predicted.py); may raise a 429 ``shed``."""


class ModelRouter:
    """Routes the requests of one model. Weights and rollbacks change at run time."""

    def __init__(
        self,
        name: str,
        config: ModelConfig,
        pools: Mapping[str, Pool],
        clock: Callable[[], float] = time.monotonic,
        wall: Callable[[], float] = time.time,
    ) -> None:
        self.name = name
        self.config = config
        self.policy: RoutingPolicy = config.routing
        self.canary: CanaryConfig | None = config.canary
        self._clock = clock
        self._wall = wall
        window = self.canary.window_seconds if self.canary else 60.0
        self.variants = {
            v: Variant(v, vc, pools, window, config.upstream_model)
            for v, vc in _variant_configs(config).items()
        }
        self._weighted = self._weights()
        self._judged_at = 0.0
        self.stable_hashes = any(pool.book.stable_hashes for pool in pools.values())
        """Its prompts' blocks are named the same in every process (prefix hints are shared
        between gateway replicas, gateway/routing/load_redis.py)."""
        self.judge_locally = True
        """False when the deployment judges from shared samples (every replica's, in Redis)."""
        self.on_rollback: Callable[[Variant, bool], None] | None = None
        """Called on every rollback; the flag says whether it was decided here (once for the
        whole deployment) or learnt from another replica."""

    @property
    def pools(self) -> list[Pool]:
        """Every pool of every variant, the baseline's first."""
        seen: dict[str, Pool] = {}
        for variant in sorted(self.variants.values(), key=lambda v: v.name != self._baseline):
            for pool in variant.by_role.values():
                seen.setdefault(pool.name, pool)
        return list(seen.values())

    @property
    def healthy(self) -> bool:
        """Some pool of the model can take a request."""
        return any(pool.healthy for pool in self.pools)

    @property
    def _baseline(self) -> str:
        return self.canary.baseline if self.canary else next(iter(self.variants))

    def _weights(self) -> list[tuple[str, float]]:
        return [(v.name, v.weight) for v in self.variants.values()]

    @property
    def baseline(self) -> Variant:
        return self.variants[self._baseline]

    def set_weight(self, variant: str, weight: float, by: str = "admin") -> bool:
        """An operator's new weight; it also lifts an automatic rollback (True when it did)."""
        target = self.variant(variant)
        lifted = target.rolled_back
        target.weight = target.held_weight = weight
        target.rolled_back = False
        if lifted:
            target.reenabled = Event(self._wall(), by)
            logger.warning(
                "canary re-enabled",
                extra={
                    "fields": {"model": self.name, "variant": variant, "weight": weight, "by": by}
                },
            )
        target.window.clear()
        self._weighted = self._weights()
        return lifted

    def variant(self, name: str) -> Variant:
        try:
            return self.variants[name]
        except KeyError:
            known = ", ".join(sorted(self.variants))
            raise InvalidParameter(
                f"Model `{self.name}` has no variant {name!r} (known: {known}).",
                param="x-gateway-variant",
            ) from None

    def choose_variant(self, sticky_key: bytes, forced: str | None) -> Variant:
        if forced is not None:
            return self.variant(forced)
        if len(self.variants) == 1:
            return next(iter(self.variants.values()))
        chosen = choose_variant(sticky_key, self._weighted)
        if chosen is None:  # every weight is zero: the baseline keeps serving
            chosen = self._baseline
        return self.variants[chosen]

    def diverted(self, sticky_key: bytes) -> bool:
        """The key's own variant was rolled back (it is served elsewhere until re-enabled)."""
        if not any(v.rolled_back for v in self.variants.values()):
            return False
        variants = self.variants.values()
        held = [(v.name, v.held_weight if v.rolled_back else v.weight) for v in variants]
        own = choose_variant(sticky_key, held)
        return own is not None and self.variants[own].rolled_back

    def plan(
        self,
        variant: Variant,
        prompt_tokens: int,
        max_tokens: int | None,
        hint: Role | None,
        *,
        failover: bool = True,
        via: str | None = None,
        blocks: PromptBlocks = NO_BLOCKS,
        predict: Predict | None = None,
    ) -> RoutePlan:
        """The variant's pools in order; a canary's plan (unless ``failover`` is off, as for a
        forced variant) falls back to the baseline's. ``via`` names why this variant serves.
        ``blocks``: the prompt's block names, matched against each pool's prefix index.
        ``predict``: the latency-predicted decision, for the variant's own order."""
        prefix = self.policy.prefix.enabled and bool(blocks.hashes)
        order = self._plan_order(
            variant, prompt_tokens, max_tokens, hint, via, blocks, prefix, predict
        )
        fallback = None
        if failover and self.canary is not None and variant.name != self._baseline:
            fallback = self._plan_order(
                self.baseline, prompt_tokens, max_tokens, hint, FAILOVER, blocks, prefix
            )
        return RoutePlan(
            self.name,
            variant,
            order.pools,
            fallback,
            prompt_tokens,
            blocks if prefix else NO_BLOCKS,
            order.matches,
            self.policy.scorers,
            order.predicted,
        )

    def _plan_order(
        self,
        variant: Variant,
        prompt_tokens: int,
        max_tokens: int | None,
        hint: Role | None,
        via: str | None,
        blocks: PromptBlocks,
        prefix: bool,
        predict: Predict | None = None,
    ) -> RoutePlan:
        matches = (
            {pool.name: pool.book.match(pool, blocks) for pool in variant.by_role.values()}
            if prefix
            else {}
        )
        colocated = variant.by_role.get(Role.COLOCATED)
        uncached = prompt_tokens
        if colocated is not None and colocated.name in matches:
            uncached = matches[colocated.name].uncached_tokens(prompt_tokens)
        predicted = None
        if predict is not None:
            prefill = {
                pool.name: matches[pool.name].uncached_tokens(prompt_tokens)
                if pool.name in matches
                else prompt_tokens
                for pool in variant.by_role.values()
            }
            predicted = predict(variant.by_role, prefill)
        chosen = None
        if predicted is not None and predicted.role is not None and predicted.reason is not None:
            chosen = (predicted.role, predicted.reason)
        request = RouteInput(prompt_tokens, uncached, max_tokens, hint, chosen)
        order = self._order(variant, request, via)
        return RoutePlan(
            self.name,
            variant,
            order,
            None,
            prompt_tokens,
            blocks if prefix else NO_BLOCKS,
            matches,
            self.policy.scorers,
            predicted,
        )

    def _order(
        self, variant: Variant, request: RouteInput, via: str | None
    ) -> tuple[tuple[Pool, str], ...]:
        return pool_order(variant.by_role, self.policy, request, via)

    def observe(self, variant: Variant, error: bool, ttft: float | None) -> None:
        """One finished request's outcome; may roll a variant back (at most one judgement/s).

        Every split model keeps its variants' windows (the admin API shows their live error rate
        and TTFT); only a model with a ``canary`` section is judged on them."""
        if len(self.variants) == 1:
            return
        now = self._clock()
        variant.window.add(now, error, ttft)
        if self.canary is None:  # windows kept for the admin view; only a canary is judged
            return
        if not self.judge_locally:
            if len(variant.unsent) < MAX_UNSENT:  # bounded while the shared store is away
                variant.unsent.append((error, ttft))
        elif now - self._judged_at >= _JUDGE_EVERY_SECONDS:
            self._judged_at = now
            self._judge(now)

    def window(self, variant: Variant) -> WindowSummary:
        """The variant's outcomes over the recent window (empty for a one-variant model)."""
        return variant.window.summary(self._clock())

    def candidates(self) -> list[Variant]:
        """The variants a judgement may roll back: in the split, not the baseline."""
        if self.canary is None:
            return []
        return [
            v
            for v in self.variants.values()
            if v.name != self._baseline and not v.rolled_back and v.weight > 0
        ]

    def _judge(self, now: float) -> None:
        canary = self.canary
        assert canary is not None
        baseline = self.baseline.window.summary(now)
        for variant in self.candidates():
            reason = verdict(variant.window.summary(now), baseline, canary)
            if reason is not None:
                self.roll_back(variant, reason, "this replica", decided_here=True)

    def roll_back(
        self,
        variant: Variant,
        reason: str,
        by: str,
        *,
        decided_here: bool,
        decided_at: float | None = None,
    ) -> None:
        """Take the variant out of the split; ``decided_here`` False: another replica decided
        (learnt from the shared state), so the decision is not counted twice."""
        if variant.rolled_back:
            return
        variant.held_weight = variant.weight
        variant.weight = 0.0
        variant.rolled_back = True
        variant.rollback = Event(decided_at or self._wall(), by, reason)
        variant.rollback_applied_at = self._wall()
        self._weighted = self._weights()
        logger.warning(
            "canary rolled back",
            extra={
                "fields": {
                    "model": self.name,
                    "variant": variant.name,
                    "reason": reason,
                    "decided_by": by,
                    "decided_here": decided_here,
                }
            },
        )
        if self.on_rollback is not None:
            self.on_rollback(variant, decided_here)

    def carry_over(self, previous: ModelRouter) -> None:
        """After a config reload: keep rollbacks and recent outcomes of unchanged variants.

        A variant whose config changed is the operator speaking: its new weight stands.
        """
        for name, variant in self.variants.items():
            old = previous.variants.get(name)
            if old is None or old.config != variant.config:
                continue
            variant.weight, variant.rolled_back = old.weight, old.rolled_back
            variant.held_weight, variant.rollback = old.held_weight, old.rollback
            variant.reenabled, variant.weight_event_at = old.reenabled, old.weight_event_at
            variant.rollback_applied_at, variant.unsent = old.rollback_applied_at, old.unsent
            variant.window = old.window
        self._weighted = self._weights()


def _variant_configs(config: ModelConfig) -> dict[str, VariantConfig]:
    if config.variants is not None:
        return config.variants
    assert config.pool is not None  # the config validator guarantees one of the two
    single = VariantConfig(
        weight=1.0,
        pools=VariantPools(colocated=config.pool),
        upstream_model=config.upstream_model,
    )
    return {DEFAULT_VARIANT: single}
