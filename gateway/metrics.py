"""Prometheus metrics of one gateway app, on a registry of its own (no global state).

Labels carry only bounded values: model and pool names from config, status codes, error kinds.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST

LATENCY_BUCKETS = (
    0.001,
    0.0025,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1,
    2.5,
    5,
    10,
    30,
    60,
    120,
)


class GatewayMetrics:
    content_type = CONTENT_TYPE_LATEST

    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        self.requests = Counter(
            "gateway_requests", "Requests answered", ["model", "pool", "status"], registry=r
        )
        self.in_flight = Gauge("gateway_requests_in_flight", "Requests in progress", registry=r)
        self.duration = Histogram(
            "gateway_request_duration_seconds",
            "Time from request to the last byte of the response",
            ["model", "pool"],
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.time_to_first_byte = Histogram(
            "gateway_time_to_first_byte_seconds",
            "Time from request to the first upstream body byte relayed",
            ["model", "pool"],
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.upstream_errors = Counter(
            "gateway_upstream_errors", "Upstream failures by kind", ["pool", "kind"], registry=r
        )
        self.client_disconnects = Counter(
            "gateway_client_disconnects",
            "Requests the client abandoned",
            ["model", "pool"],
            registry=r,
        )
        self.replica_healthy = Gauge(
            "gateway_replica_healthy",
            "1 if the replica is in rotation",
            ["pool", "replica"],
            registry=r,
        )
        self.replica_outstanding = Gauge(
            "gateway_replica_outstanding", "Requests outstanding", ["pool", "replica"], registry=r
        )

    def render(self) -> bytes:
        return generate_latest(self.registry)
