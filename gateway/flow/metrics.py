"""Prometheus metrics of flow control. Labels are bounded: bands come from config, results from
a fixed set (gateway/flow/queue.py's ``RESULTS``)."""

from __future__ import annotations

from prometheus_client import Counter, Gauge, Histogram

from gateway.metrics import LATENCY_BUCKETS, GatewayMetrics


class FlowMetrics:
    def __init__(self, gateway: GatewayMetrics) -> None:
        r = gateway.registry
        self.depth = Gauge(
            "gateway_flow_queue_depth",
            "Requests waiting in the flow-control queue, per priority band",
            ["band"],
            registry=r,
        )
        self.queued_bytes = Gauge(
            "gateway_flow_queue_bytes", "Request bodies held by the flow-control queue", registry=r
        )
        self.results = Counter(
            "gateway_flow_requests",
            "Requests that met a saturated gateway, per band and what became of them "
            "(dispatched, timeout, shed, full, evicted, gone)",
            ["band", "result"],
            registry=r,
        )
        self.wait = Histogram(
            "gateway_flow_wait_seconds",
            "Time requests waited in the flow-control queue, per band and result",
            ["band", "result"],
            buckets=LATENCY_BUCKETS,
            registry=r,
        )

    def observe(self, band: str, result: str, waited: float) -> None:
        self.results.labels(band, result).inc()
        self.wait.labels(band, result).observe(waited)
