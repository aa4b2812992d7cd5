"""Which pools serve as a model's PD pool (a pool's role lives in the models' variants)."""

from __future__ import annotations

from gateway.config import GatewayConfig


def pd_pools(config: GatewayConfig) -> frozenset[str]:
    return frozenset(
        variant.pools.pd
        for model in config.models.values()
        for variant in (model.variants or {}).values()
        if variant.pools.pd is not None
    )
