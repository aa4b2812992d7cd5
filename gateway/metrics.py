"""Prometheus metrics of one gateway app, on a registry of its own (no global state).

Labels carry only bounded values: model and pool names from config, status codes, error kinds.
Series labelled by tenant are on a registry of their own, rendered only for a caller allowed to
see every tenant (an admin key or the scrape credential: gateway/auth/middleware.py)::

    metrics.render()                # every series
    metrics.render(tenants=False)   # what a public /metrics shows
"""

from __future__ import annotations

import time
from bisect import bisect_left
from collections.abc import Iterator
from typing import Generic, TypeVar

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST
from prometheus_client.metrics_core import CounterMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector
from prometheus_client.samples import Sample

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


class Count:
    """One labelled counter value: a plain number (no lock, no validation per increment)."""

    __slots__ = ("created", "value")

    def __init__(self) -> None:
        self.value = 0.0
        self.created = time.time()

    def inc(self, amount: float = 1) -> None:
        self.value += amount


class Buckets:
    """One labelled histogram: a count per bucket (``le`` bounds, then +Inf) and the sum."""

    __slots__ = ("bounds", "counts", "created", "total")

    def __init__(self, bounds: tuple[float, ...]) -> None:
        self.bounds = bounds
        self.counts = [0] * (len(bounds) + 1)
        self.total = 0.0
        self.created = time.time()

    def observe(self, value: float) -> None:
        self.counts[bisect_left(self.bounds, value)] += 1  # the first bound >= value: le
        self.total += value


class PlainCounter:
    """A labelled counter kept as plain numbers and exposed when scraped.

    ``prometheus_client``'s Counter takes a lock and checks its state on every increment; the
    gateway serves from one event-loop thread, so the request path only adds to a float and
    :class:`PlainMetrics` builds the metric family at scrape time (about a third of the cost,
    measured in README, Performance). Same name, help, labels, samples
    (``_total`` and ``_created``) as the Counter it replaces::

        requests = PlainCounter("gateway_requests", "Requests answered", ["model", "status"])
        requests.labels("m", "200").inc()       # as with prometheus_client's Counter
    """

    def __init__(self, name: str, documentation: str, labelnames: list[str]) -> None:
        self.name, self.documentation, self.labelnames = name, documentation, labelnames
        self._children: dict[tuple[str, ...], Count] = {}

    def labels(self, *labels: str) -> Count:
        child = self._children.get(labels)
        if child is None:
            child = self._children[labels] = Count()
        return child

    def family(self) -> Metric:
        family = CounterMetricFamily(self.name, self.documentation, labels=self.labelnames)
        for labels, child in list(self._children.items()):
            family.add_metric(labels, child.value, created=child.created)
        return family


class PlainHistogram:
    """A labelled histogram kept as plain bucket counts (see :class:`PlainCounter`)."""

    def __init__(
        self, name: str, documentation: str, labelnames: list[str], buckets: tuple[float, ...]
    ) -> None:
        self.name, self.documentation, self.labelnames = name, documentation, labelnames
        self.bounds = tuple(float(b) for b in buckets)
        self._children: dict[tuple[str, ...], Buckets] = {}

    def labels(self, *labels: str) -> Buckets:
        child = self._children.get(labels)
        if child is None:
            child = self._children[labels] = Buckets(self.bounds)
        return child

    def family(self) -> Metric:
        family = HistogramMetricFamily(self.name, self.documentation, labels=self.labelnames)
        les = [*(_le(b) for b in self.bounds), "+Inf"]
        for labels, child in list(self._children.items()):
            cumulative, running = [], 0
            for le, count in zip(les, child.counts, strict=True):
                running += count
                cumulative.append((le, float(running)))
            family.add_metric(labels, cumulative, child.total)
            # add_metric has no ``created``; the sample prometheus_client's Histogram writes.
            names = dict(zip(self.labelnames, labels, strict=True))
            family.samples.append(Sample(self.name + "_created", names, child.created))
        return family


def _le(bound: float) -> str:
    """A bucket bound as prometheus_client writes it (``0.001``, ``1.0``)."""
    return repr(bound)


class PlainMetrics(Collector):
    """The registry's view of the plain metrics: their families, built when scraped."""

    def __init__(self, metrics: list[PlainCounter | PlainHistogram]) -> None:
        self.metrics = metrics

    def collect(self) -> Iterator[Metric]:
        for metric in self.metrics:
            yield metric.family()


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
# A loop's lag that matters starts at a millisecond (a first byte's budget is a few); a GC pause
# worth seeing at a tenth of one.
LAG_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10)
GC_BUCKETS = (0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1)


class GatewayMetrics:
    """Every metric of one app. One style for what is counted: :class:`PlainCounter` and
    :class:`PlainHistogram`, ``metric.labels(...)`` at each use (a dict lookup, no lock), made
    with :meth:`counter` and :meth:`histogram` so that they are exposed; prometheus_client's
    own types only for gauges, which are set rarely or read when scraped."""

    content_type = CONTENT_TYPE_LATEST

    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self.tenant_registry = CollectorRegistry(auto_describe=True)
        """The series labelled by tenant: never on a public surface."""
        self._public = PlainMetrics([])
        self._tenants = PlainMetrics([])
        self.registry.register(self._public)
        self.tenant_registry.register(self._tenants)
        self._requests()
        self._phases()
        self._replicas()
        self._refusals()
        self._loop()

    def counter(
        self, name: str, documentation: str, labelnames: list[str], *, tenants: bool = False
    ) -> PlainCounter:
        """A counter exposed on this app's registry (``tenants``: on the tenants' one)."""
        counter = PlainCounter(name, documentation, labelnames)
        (self._tenants if tenants else self._public).metrics.append(counter)
        return counter

    def histogram(
        self, name: str, documentation: str, labelnames: list[str], buckets: tuple[float, ...]
    ) -> PlainHistogram:
        histogram = PlainHistogram(name, documentation, labelnames, buckets)
        self._public.metrics.append(histogram)
        return histogram

    def _requests(self) -> None:
        """What every request updates: its count, duration and first byte, its tokens."""
        self.requests = self.counter(
            "gateway_requests", "Requests answered", ["model", "pool", "variant", "status"]
        )
        # A plain count, read when scraped: a locked gauge update twice per request cost more.
        self.requests_in_flight = 0
        self.in_flight = Gauge(
            "gateway_requests_in_flight", "Requests in progress", registry=self.registry
        )
        self.in_flight.set_function(lambda: self.requests_in_flight)
        self.duration = self.histogram(
            "gateway_request_duration_seconds",
            "Time from request to the last byte of the response",
            ["model", "pool"],
            LATENCY_BUCKETS,
        )
        self.time_to_first_byte = self.histogram(
            "gateway_time_to_first_byte_seconds",
            "Time from request to the first upstream body byte relayed",
            ["model", "pool"],
            LATENCY_BUCKETS,
        )
        self.upstream_errors = self.counter(
            "gateway_upstream_errors", "Upstream failures by kind", ["pool", "kind"]
        )
        self.client_disconnects = self.counter(
            "gateway_client_disconnects", "Requests the client abandoned", ["model", "pool"]
        )
        self.tokens = self.counter(
            "gateway_tokens",
            "Tokens by tenant, model and direction (input or output)",
            ["tenant", "model", "direction"],
            tenants=True,
        )
        self.tenant_requests = self.counter(
            "gateway_tenant_requests",
            "Requests by tenant and status class (2xx, 4xx, 5xx)",
            ["tenant", "status_class"],
            tenants=True,
        )
        self.partial_requests = self.counter(
            "gateway_partial_requests",
            "Requests accounted from what was delivered (answers not delivered whole)",
            ["model"],
        )

    def _phases(self) -> None:
        """Per phase (issue 7): named after gen_ai.server.time_to_first_token and
        gen_ai.server.time_per_output_token; prompt_length is a band ("256-1k"), never a
        number."""
        self.time_to_first_token = self.histogram(
            "gen_ai_server_time_to_first_token_seconds",
            "Time from request received to the first output token (streaming)",
            ["model", "pool", "prompt_length"],
            TTFT_BUCKETS,
        )
        self.time_per_output_token = self.histogram(
            "gen_ai_server_time_per_output_token_seconds",
            "Decode time per output token after the first (streaming)",
            ["model", "pool"],
            TPOT_BUCKETS,
        )

    def _replicas(self) -> None:
        """The pools' state, set when scraped (gateway/runtime/table.py)."""
        r = self.registry
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

    def _refusals(self) -> None:
        """Refused by the limiter (issue 5), the server's caps, or rolled back (issue 6)."""
        self.rate_limit_refusals = self.counter(
            "gateway_rate_limit_refusals",
            "Requests refused by a rate limit",
            ["tenant", "limit"],
            tenants=True,
        )
        # Refused by the server's own caps, before any request stage (gateway/server/overload.py;
        # "connections" by the edge protocol, gateway/server/refusals.py).
        self.overload_refusals = self.counter(
            "gateway_overload_refusals",
            "Requests refused by the server's caps (in_flight, uploads, client_uploads, "
            "connections)",
            ["reason"],
        )
        self.uploads_in_progress = Gauge(
            "gateway_uploads_in_progress", "Request bodies still arriving", registry=self.registry
        )
        self.canary_rollbacks = self.counter(
            "gateway_canary_rollbacks",
            "Canary variants rolled back automatically",
            ["model", "variant"],
        )

    def _loop(self) -> None:
        """What holds the event loop (issue 41, gateway/server/loop_watch.py)."""
        self.event_loop_lag = self.histogram(
            "gateway_event_loop_lag_seconds",
            "How much later than asked the event loop woke the lag probe's sleeping task",
            [],
            LAG_BUCKETS,
        )
        self.gc_pause = self.histogram(
            "gateway_gc_pause_seconds",
            "Collections of the cyclic garbage collector, by generation",
            ["generation"],
            GC_BUCKETS,
        )

    def render(self, *, tenants: bool = True) -> bytes:
        """The Prometheus text; ``tenants=False`` leaves out every series labelled by tenant."""
        public = generate_latest(self.registry)
        return public + generate_latest(self.tenant_registry) if tenants else public
