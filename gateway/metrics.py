"""Prometheus metrics of one gateway app, on a registry of its own (no global state).

Labels carry only bounded values: model and pool names from config, status codes, error kinds.
"""

from __future__ import annotations

from typing import Generic, TypeVar

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST

MetricT = TypeVar("MetricT", Counter, Histogram)


class Children(Generic[MetricT]):
    """The labelled children of one metric, each looked up once: ``labels()`` takes a lock and
    validates on every call, which is not free per request. The label sets are bounded by the
    configuration, and so is this cache::

        requests = Children(metrics.requests)
        requests("model", "pool", "200").inc()
    """

    __slots__ = ("_children", "_metric")

    def __init__(self, metric: MetricT) -> None:
        self._metric: MetricT = metric
        self._children: dict[tuple[str, ...], MetricT] = {}

    def __call__(self, *labels: str) -> MetricT:
        child = self._children.get(labels)
        if child is None:
            child = self._children[labels] = self._metric.labels(*labels)
        return child


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
# The bucket boundaries OpenTelemetry's GenAI semantic conventions advise for these two.
TTFT_BUCKETS = (
    0.001,
    0.005,
    0.01,
    0.02,
    0.04,
    0.06,
    0.08,
    0.1,
    0.25,
    0.5,
    0.75,
    1,
    2.5,
    5,
    7.5,
    10,
)
TPOT_BUCKETS = (0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1, 2.5)


class GatewayMetrics:
    content_type = CONTENT_TYPE_LATEST

    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        self.requests = Counter(
            "gateway_requests",
            "Requests answered",
            ["model", "pool", "variant", "status"],
            registry=r,
        )
        # A plain count, read when scraped: a locked gauge update twice per request cost more.
        self.requests_in_flight = 0
        self.in_flight = Gauge("gateway_requests_in_flight", "Requests in progress", registry=r)
        self.in_flight.set_function(lambda: self.requests_in_flight)
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
        self.pool_healthy = Gauge(
            "gateway_pool_healthy", "1 if the pool has a replica in rotation", ["pool"], registry=r
        )
        # Per phase (issue 7): named after gen_ai.server.time_to_first_token and
        # gen_ai.server.time_per_output_token; prompt_length is a band ("256-1k"), never a number.
        self.time_to_first_token = Histogram(
            "gen_ai_server_time_to_first_token_seconds",
            "Time from request received to the first output token (streaming)",
            ["model", "pool", "prompt_length"],
            buckets=TTFT_BUCKETS,
            registry=r,
        )
        self.time_per_output_token = Histogram(
            "gen_ai_server_time_per_output_token_seconds",
            "Decode time per output token after the first (streaming)",
            ["model", "pool"],
            buckets=TPOT_BUCKETS,
            registry=r,
        )
        self.tokens = Counter(
            "gateway_tokens",
            "Tokens by tenant, model and direction (input or output)",
            ["tenant", "model", "direction"],
            registry=r,
        )
        self.tenant_requests = Counter(
            "gateway_tenant_requests",
            "Requests by tenant and status class (2xx, 4xx, 5xx)",
            ["tenant", "status_class"],
            registry=r,
        )
        # Counted by the limiter (issue 5) and the canary (issue 6).
        self.rate_limit_refusals = Counter(
            "gateway_rate_limit_refusals",
            "Requests refused by a rate limit",
            ["tenant", "limit"],
            registry=r,
        )
        self.canary_rollbacks = Counter(
            "gateway_canary_rollbacks",
            "Canary variants rolled back automatically",
            ["model", "variant"],
            registry=r,
        )

        # What every request updates, through memoised children (see Children).
        self.requests_by = Children(self.requests)
        self.duration_by = Children(self.duration)
        self.time_to_first_byte_by = Children(self.time_to_first_byte)
        self.tenant_requests_by = Children(self.tenant_requests)
        self.time_to_first_token_by = Children(self.time_to_first_token)
        self.time_per_output_token_by = Children(self.time_per_output_token)
        self.tokens_by = Children(self.tokens)

    def render(self) -> bytes:
        return generate_latest(self.registry)
