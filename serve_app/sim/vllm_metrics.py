"""``GET /metrics`` of the simulated engine: vLLM's metric names, labels and help, in the same
Prometheus text that vLLM writes (vLLM uses prometheus_client too; so does this, with a
registry of its own per app, never the global one).

Gauges are read from the scheduler when scraped; counters follow the scheduler's totals::

    metrics = VllmMetrics("sim-model")
    body = metrics.render(scheduler)   # bytes, text/plain; version=0.0.4
"""

from __future__ import annotations

import dataclasses

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

from serve_app.sim.scheduler import Counters, Scheduler

CONTENT_TYPE = b"text/plain; version=0.0.4; charset=utf-8"
# vLLM's buckets for vllm:time_to_first_token_seconds.
TTFT_BUCKETS = (
    0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75,
    1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0,
)  # fmt: skip
_LABELS = ("model_name", "engine")


class VllmMetrics:
    """The subset of vLLM's metrics the gateway reads, labelled ``model_name`` and ``engine``."""

    def __init__(self, model_name: str) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        labels = {"model_name": model_name, "engine": "0"}
        r = self.registry
        self._running = Gauge(
            "vllm:num_requests_running",
            "Number of requests in model execution batches.",
            _LABELS,
            registry=r,
        ).labels(**labels)
        self._waiting = Gauge(
            "vllm:num_requests_waiting",
            "Number of requests waiting to be processed.",
            _LABELS,
            registry=r,
        ).labels(**labels)
        self._usage = Gauge(
            "vllm:kv_cache_usage_perc",
            "KV-cache usage. 1 means 100 percent usage.",
            _LABELS,
            registry=r,
        ).labels(**labels)
        self._queries = Counter(
            "vllm:prefix_cache_queries",
            "Prefix cache queries, in terms of number of queried tokens.",
            _LABELS,
            registry=r,
        ).labels(**labels)
        self._hits = Counter(
            "vllm:prefix_cache_hits",
            "Prefix cache hits, in terms of number of cached tokens.",
            _LABELS,
            registry=r,
        ).labels(**labels)
        self._prompt = Counter(
            "vllm:prompt_tokens", "Number of prefill tokens processed.", _LABELS, registry=r
        ).labels(**labels)
        self._generation = Counter(
            "vllm:generation_tokens",
            "Number of generation tokens processed.",
            _LABELS,
            registry=r,
        ).labels(**labels)
        self._ttft = Histogram(
            "vllm:time_to_first_token_seconds",
            "Histogram of time to first token in seconds.",
            _LABELS,
            buckets=TTFT_BUCKETS,
            registry=r,
        ).labels(**labels)
        self._exported = Counters()

    def observe_ttft(self, seconds: float) -> None:
        self._ttft.observe(seconds)

    def render(self, scheduler: Scheduler) -> bytes:
        self._running.set(len(scheduler.running))
        self._waiting.set(len(scheduler.waiting))
        self._usage.set(scheduler.pool.usage())
        self._catch_up(scheduler.counters)
        return generate_latest(self.registry)

    def _catch_up(self, now: Counters) -> None:
        """Counters only go up: add what the scheduler counted since the last scrape."""
        done = self._exported
        self._queries.inc(now.prefix_queries - done.prefix_queries)
        self._hits.inc(now.prefix_hits - done.prefix_hits)
        self._prompt.inc(now.prompt_tokens - done.prompt_tokens)
        self._generation.inc(now.generation_tokens - done.generation_tokens)
        self._exported = dataclasses.replace(now)
