"""Rate-limit metrics, registered on the gateway's own registry."""

from __future__ import annotations

from prometheus_client import Gauge

from gateway.metrics import GatewayMetrics


class LimitMetrics:
    """``refusals`` is the gateway's ``gateway_rate_limit_refusals`` (labels tenant, limit)."""

    def __init__(self, metrics: GatewayMetrics) -> None:
        self.gateway = metrics
        self.refusals = metrics.rate_limit_refusals
        self.backend_up = Gauge(
            "gateway_rate_limiter_backend_up",
            "1 while the rate limiter's store answers, 0 while it does not",
            registry=metrics.registry,
        )
        self.backend_errors = metrics.counter(
            "gateway_rate_limiter_backend_errors",
            "Admissions the limiter's store could not answer (then the failure policy applied)",
            ["policy"],
        )
        self.backend_up.set(1)
