"""Rate-limit metrics, registered on the gateway's own registry."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge


class LimitMetrics:
    """``refusals`` is the gateway's ``gateway_rate_limit_refusals`` (labels tenant, limit)."""

    def __init__(self, registry: CollectorRegistry, refusals: Counter) -> None:
        self.refusals = refusals
        self.backend_up = Gauge(
            "gateway_rate_limiter_backend_up",
            "1 while the rate limiter's store answers, 0 while it does not",
            registry=registry,
        )
        self.backend_errors = Counter(
            "gateway_rate_limiter_backend_errors",
            "Admissions the limiter's store could not answer (then the failure policy applied)",
            ["policy"],
            registry=registry,
        )
        self.backend_up.set(1)
