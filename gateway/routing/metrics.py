"""Prometheus metrics of routing and canaries, on the gateway's own registry.

Labels are bounded: model, variant and pool names come from config; reasons from a fixed set.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from gateway.metrics import LATENCY_BUCKETS, Children, GatewayMetrics
from gateway.routing.predicted import PredictionErrors

_TOKENS_PER_SECOND_BUCKETS = (1, 5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000)


class RoutingMetrics:
    """Routing's metrics, declared in groups: decisions and retries, variants, canaries, pools,
    engines."""

    def __init__(self, gateway: GatewayMetrics) -> None:
        r = gateway.registry
        self._decisions(r)
        self._variants(r)
        self._canaries(gateway, r)
        self._pools(r)
        self._engines(r)
        self.reloads = Counter(
            "gateway_config_reloads", "Configuration reloads by result", ["result"], registry=r
        )
        self.prediction_errors = PredictionErrors()
        """The latency models' error per pool; the routing's book is attached when built."""
        r.register(self.prediction_errors)

    def _decisions(self, r: CollectorRegistry) -> None:
        self.decisions = Counter(
            "gateway_routing_decisions",
            "Requests by the variant and pool that served them, and why",
            ["model", "variant", "pool", "reason"],
            registry=r,
        )
        self.retries = Counter(
            "gateway_upstream_retries",
            "Attempts repeated on another replica or pool before any byte reached the client",
            ["model", "pool", "cause"],
            registry=r,
        )
        self.retries_refused = Counter(
            "gateway_upstream_retries_refused",
            "Retries not made because the retry budget was spent",
            ["model"],
            registry=r,
        )
        self.decision = Children(self.decisions)

    def _variants(self, r: CollectorRegistry) -> None:
        self.variant_requests = Counter(
            "gateway_variant_requests",
            "Finished requests per model variant",
            ["model", "variant", "outcome"],
            registry=r,
        )
        self.variant_ttft = Histogram(
            "gateway_variant_time_to_first_token_seconds",
            "Time to the first relayed body byte, per model variant",
            ["model", "variant"],
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.variant_tokens_per_second = Histogram(
            "gateway_variant_output_tokens_per_second",
            "Output tokens per second after the first token, per model variant",
            ["model", "variant"],
            buckets=_TOKENS_PER_SECOND_BUCKETS,
            registry=r,
        )
        self.variant_weight = Gauge(
            "gateway_variant_weight",
            "Live weight of each variant",
            ["model", "variant"],
            registry=r,
        )
        self.variant_request = Children(self.variant_requests)
        self.variant_first_token = Children(self.variant_ttft)
        self.variant_speed = Children(self.variant_tokens_per_second)

    def _canaries(self, gateway: GatewayMetrics, r: CollectorRegistry) -> None:
        self.rollbacks = gateway.canary_rollbacks  # declared with the gateway's metrics
        self.failovers = Counter(
            "gateway_canary_failovers",
            "Requests moved from a variant to its baseline before any byte reached the client, "
            "by the variant they left and why (connect, status_5xx, timeout, unavailable)",
            ["model", "variant", "cause"],
            registry=r,
        )
        self.rolled_back = Gauge(
            "gateway_variant_rolled_back",
            "1 while the variant is rolled back (on every replica, whichever decided)",
            ["model", "variant"],
            registry=r,
        )
        self.reenables = Counter(
            "gateway_canary_reenables",
            "Rolled-back variants re-enabled by an operator",
            ["model", "variant"],
            registry=r,
        )

    def _pools(self, r: CollectorRegistry) -> None:
        self.breaker_open = Gauge(
            "gateway_replica_breaker_open",
            "1 while the replica's circuit breaker is open or half-open",
            ["pool", "replica"],
            registry=r,
        )
        # Pool load, refreshed when /metrics is read: labels are configured pool names and the
        # fixed saturation reasons (gateway/routing/policy.py).
        self.pool_in_flight = Gauge(
            "gateway_pool_in_flight",
            "Requests this gateway has in flight on the pool (other gateways' not included)",
            ["pool"],
            registry=r,
        )
        self.pool_prompt_tokens = Gauge(
            "gateway_pool_prompt_tokens_in_flight",
            "Prompt tokens of the requests this gateway has in flight on the pool",
            ["pool"],
            registry=r,
        )
        self.pool_saturated = Gauge(
            "gateway_pool_saturated",
            "1 while the pool is past a saturation bound, by the bound",
            ["pool", "reason"],
            registry=r,
        )
        self.prefix_index_blocks = Gauge(
            "gateway_prefix_index_blocks",
            "Block names held by the pool's prefix index",
            ["pool"],
            registry=r,
        )

    def _engines(self, r: CollectorRegistry) -> None:
        self.engine_waiting = Gauge(
            "gateway_engine_requests_waiting",
            "The pool's engines' waiting queue, as last read (vllm:num_requests_waiting)",
            ["pool"],
            registry=r,
        )
        self.engine_running = Gauge(
            "gateway_engine_requests_running",
            "The pool's engines' running batch, as last read (vllm:num_requests_running)",
            ["pool"],
            registry=r,
        )
        self.engine_kv_usage = Gauge(
            "gateway_engine_kv_cache_usage",
            "The pool's fullest engine's KV cache usage, as last read (0 to 1)",
            ["pool"],
            registry=r,
        )
        self.engine_signal_age = Gauge(
            "gateway_engine_signal_age_seconds",
            "Seconds since the pool's engine gauges were last read (-1: never)",
            ["pool"],
            registry=r,
        )
        self.engine_signal_fresh = Gauge(
            "gateway_engine_signal_fresh",
            "1 while the pool's engine gauges are within their freshness bound",
            ["pool"],
            registry=r,
        )
