"""Building the routing objects from a configuration (at start-up and on every reload)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from gateway.accounting.tokens import counters_for_models
from gateway.config import GatewayConfig
from gateway.metrics import GatewayMetrics
from gateway.routing.breaker import BreakerState
from gateway.routing.dispatch import Dispatcher
from gateway.routing.metrics import RoutingMetrics
from gateway.routing.pools import Pool, Replica
from gateway.routing.router import ModelRouter
from gateway.routing.service import Routing


def build_routing(config: GatewayConfig, gateway_metrics: GatewayMetrics) -> Routing:
    """Token counters (tokenizers load here, not on the first request), dispatcher, metrics."""
    metrics = RoutingMetrics(gateway_metrics)
    counters = counters_for_models(
        config.tokenizer, [(name, m.tokenizer) for name, m in config.models.items()]
    )
    return Routing(counters, Dispatcher(config.retries, metrics), metrics)


def build_routers(
    config: GatewayConfig, pools: Mapping[str, Pool], routing: Routing
) -> dict[str, ModelRouter]:
    routers = {}
    for name, model in config.models.items():
        router = ModelRouter(name, model, pools)
        router.on_rollback = routing.on_rollback(router)
        routers[name] = router
    publish_weights(routers.values(), routing.metrics)
    return routers


def publish_weights(routers: Iterable[ModelRouter], metrics: RoutingMetrics) -> None:
    for router in routers:
        for variant in router.variants.values():
            metrics.variant_weight.labels(router.name, variant.name).set(variant.weight)


def replica_status(replica: Replica) -> dict[str, Any]:
    """A replica as /readyz shows it."""
    return {
        "url": replica.url,
        "healthy": replica.healthy,
        "error": replica.last_error,
        "breaker": replica.breaker.state.value,
        "last_failure": replica.last_failure,
        "outstanding": replica.outstanding,
    }


def publish_pool_state(metrics: RoutingMetrics, pools: Iterable[Pool]) -> None:
    """Refresh the breaker gauges (called when /metrics is scraped, not per request)."""
    for pool in pools:
        for replica in pool.replicas:
            is_open = replica.breaker.state is not BreakerState.CLOSED
            metrics.breaker_open.labels(pool.name, replica.url).set(1 if is_open else 0)
