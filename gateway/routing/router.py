"""Per-model routing: which variant (canary split), then which pool (prompt length, failover).

The decision is a :class:`RoutePlan`: the variant, and its pools in the order to try them, each with
the reason it is in that place. Pool order: the preferred role first (PD for prompts of at least
``pd_threshold_tokens`` tokens, or output of at least ``pd_min_max_tokens``; colocated otherwise; a
trusted ``x-gateway-pool-hint`` overrides), then the other role as the failover, unless the prompt
is too long for colocated. The dispatcher skips pools that are unhealthy or saturated::

    router = ModelRouter("llama", model_config, pools)
    variant = router.choose_variant(b"key-id", forced=None)
    plan = router.plan(variant, prompt_tokens=2000, max_tokens=64, hint=None)
    plan.pools  # [(pd pool, "prompt_long"), (colocated pool, "prompt_long")]
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from gateway.errors import InvalidParameter
from gateway.routing.canary import SlidingWindow, WindowSummary, choose_variant, rollback_reason
from gateway.routing.config import (
    CanaryConfig,
    ModelConfig,
    Role,
    RoutingPolicy,
    VariantConfig,
    VariantPools,
)
from gateway.routing.pools import Pool

logger = logging.getLogger(__name__)

DEFAULT_VARIANT = "default"
"""The one variant of a model configured with a single ``pool``."""

_JUDGE_EVERY_SECONDS = 1.0  # a window summary sorts its TTFTs: not on every request


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
        self.last_rollback: tuple[float, str] | None = None
        """When (UNIX time) and why the canary judge last rolled this variant back; it stays
        after an operator lifts the rollback, as the record of what happened."""
        self.upstream_model = config.upstream_model or upstream_model
        self.by_role = {
            role: pools[pool_name]
            for role in Role
            if (pool_name := getattr(config.pools, role.value)) is not None
        }
        self.window = SlidingWindow(window)


@dataclass(frozen=True, slots=True)
class RoutePlan:
    model: str
    variant: Variant
    pools: tuple[tuple[Pool, str], ...]
    """Pools in the order to try them, each with its routing reason."""

    @property
    def preferred(self) -> Pool:
        return self.pools[0][0]


class ModelRouter:
    """Routes the requests of one model. Weights and rollbacks change at run time."""

    def __init__(
        self,
        name: str,
        config: ModelConfig,
        pools: Mapping[str, Pool],
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.name = name
        self.config = config
        self.policy: RoutingPolicy = config.routing
        self.canary: CanaryConfig | None = config.canary
        self._clock = clock
        window = self.canary.window_seconds if self.canary else 60.0
        self.variants = {
            v: Variant(v, vc, pools, window, config.upstream_model)
            for v, vc in _variant_configs(config).items()
        }
        self._weighted = self._weights()
        self._judged_at = 0.0
        self.on_rollback: Callable[[Variant, str], None] | None = None

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

    def set_weight(self, variant: str, weight: float) -> None:
        """An operator's new weight; it also lifts an automatic rollback."""
        target = self.variant(variant)
        target.weight = weight
        target.rolled_back = False
        target.window.clear()
        self._weighted = self._weights()

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

    def plan(
        self, variant: Variant, prompt_tokens: int, max_tokens: int | None, hint: Role | None
    ) -> RoutePlan:
        by_role = variant.by_role
        if len(by_role) == 1:
            (pool,) = by_role.values()
            return RoutePlan(self.name, variant, ((pool, "single_pool"),))
        role, reason = self._preferred_role(prompt_tokens, max_tokens, hint)
        other = Role.COLOCATED if role is Role.PD else Role.PD
        order = [(by_role[role], reason)]
        limit = self.policy.colocated_max_prompt_tokens
        if other is Role.PD or limit is None or prompt_tokens <= limit:
            order.append((by_role[other], reason))
        return RoutePlan(self.name, variant, tuple(order))

    def _preferred_role(
        self, prompt_tokens: int, max_tokens: int | None, hint: Role | None
    ) -> tuple[Role, str]:
        policy = self.policy
        if hint is not None:
            return hint, "hint"
        if prompt_tokens >= policy.pd_threshold_tokens:
            return Role.PD, "prompt_long"
        if (
            policy.pd_min_max_tokens is not None
            and max_tokens is not None
            and max_tokens >= policy.pd_min_max_tokens
        ):
            return Role.PD, "output_long"
        return Role.COLOCATED, "prompt_short"

    def observe(self, variant: Variant, error: bool, ttft: float | None) -> None:
        """One finished request's outcome; may roll a variant back (at most one judgement/s).

        Every split model keeps its variants' windows (the admin API shows their live error rate
        and TTFT); only a model with a ``canary`` section is judged on them."""
        if len(self.variants) == 1:
            return
        now = self._clock()
        variant.window.add(now, error, ttft)
        if self.canary is not None and now - self._judged_at >= _JUDGE_EVERY_SECONDS:
            self._judged_at = now
            self._judge(now)

    def window(self, variant: Variant) -> WindowSummary:
        """The variant's outcomes over the recent window (empty for a one-variant model)."""
        return variant.window.summary(self._clock())

    def _judge(self, now: float) -> None:
        canary = self.canary
        assert canary is not None
        baseline = self.variants[canary.baseline].window.summary(now)
        for variant in self.variants.values():
            if variant.name == canary.baseline or variant.rolled_back or variant.weight <= 0:
                continue
            reason = rollback_reason(
                variant.window.summary(now),
                baseline,
                min_requests=canary.min_requests,
                error_rate_margin=canary.error_rate_margin,
                ttft_p95_margin=canary.ttft_p95_margin,
                ttft_p95_min_delta=canary.ttft_p95_min_delta_seconds,
            )
            if reason is not None:
                self._roll_back(variant, reason)

    def _roll_back(self, variant: Variant, reason: str) -> None:
        variant.weight = 0.0
        variant.rolled_back = True
        variant.last_rollback = (time.time(), reason)
        self._weighted = self._weights()
        logger.warning(
            "canary rolled back",
            extra={"fields": {"model": self.name, "variant": variant.name, "reason": reason}},
        )
        if self.on_rollback is not None:
            self.on_rollback(variant, reason)

    def carry_over(self, previous: ModelRouter) -> None:
        """After a config reload: keep rollbacks and recent outcomes of unchanged variants.

        A variant whose config changed is the operator speaking: its new weight stands.
        """
        for name, variant in self.variants.items():
            old = previous.variants.get(name)
            if old is None or old.config != variant.config:
                continue
            variant.weight, variant.rolled_back = old.weight, old.rolled_back
            variant.window, variant.last_rollback = old.window, old.last_rollback
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
