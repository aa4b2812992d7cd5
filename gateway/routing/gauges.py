"""The engines' own load, read from vLLM's Prometheus gauges, with a freshness bound.

vLLM writes ``vllm:num_requests_running``, ``vllm:num_requests_waiting``,
``vllm:kv_cache_usage_perc`` (a fraction, 0 to 1) and the counters
``vllm:prefix_cache_queries_total`` and ``vllm:prefix_cache_hits_total`` (tokens), labelled
``model_name`` and ``engine``. Behind Ray Serve LLM the same series come through Ray's metrics
export, named ``ray_vllm:...`` (or ``ray_vllm_...``) with Ray's labels beside vLLM's. A pool names
the endpoints to read and, optionally, labels a series must carry (its model, when one Ray exports
several apps)::

    reading = parse_engine_metrics(text, {"model_name": "tiny"})
    reading.running, reading.waiting, reading.kv_usage

    gauges = EngineGauges(max_age=2.0, clock=time.monotonic)
    gauges.put(reading)                 # after each scrape
    gauges.fresh()                      # the reading, or None once it is older than max_age

A missing, unreadable or stale reading is None: routing then uses the gateway's own view, never an
error. Parsing is bounded: only lines of the five names are parsed, at most ``MAX_SERIES`` series,
so a Ray export of thousands of series costs a scan, not a parse.
"""

from __future__ import annotations

import asyncio
import logging
import math
import re
import time
from collections.abc import Awaitable, Callable, Mapping

from prometheus_client.parser import text_string_to_metric_families

from gateway.values import value

logger = logging.getLogger(__name__)

MAX_SERIES = 1024
MAX_BODY_BYTES = 16 * 1024 * 1024

# vLLM's names, plain or through Ray's export (``ray_`` before; ``:`` kept or made ``_``).
_WANTED = re.compile(
    rb"^(?:ray_)?vllm[:_](num_requests_running|num_requests_waiting|kv_cache_usage_perc"
    rb"|gpu_cache_usage_perc|prefix_cache_queries(?:_total)?|prefix_cache_hits(?:_total)?)[{ ].*$",
    re.MULTILINE,
)
_NAME = re.compile(
    r"^(?:ray_)?vllm[:_](num_requests_running|num_requests_waiting|kv_cache_usage_perc"
    r"|gpu_cache_usage_perc|prefix_cache_queries|prefix_cache_hits)(?:_total)?$"
)

Fetch = Callable[[str], Awaitable[bytes]]
"""``await fetch(url)``: the body of a 2xx answer to ``GET url``; raises otherwise."""


@value
class EngineReading:
    """One scrape of one pool's engines (summed over the series that matched)."""

    running: float
    waiting: float
    kv_usage: float | None
    """The fullest engine's KV cache usage (0 to 1); None when no engine reported it."""
    prefix_queries: float
    prefix_hits: float
    series: int
    """Series that matched: 0 means the endpoint answered but exports no vLLM engine."""
    at: float = 0.0
    """When it was read (the gauges' clock)."""


def parse_engine_metrics(text: bytes, labels: Mapping[str, str]) -> EngineReading:
    """The vLLM series of a Prometheus text exposition whose labels include ``labels``."""
    lines = [m.group(0) for m, _ in zip(_WANTED.finditer(text), range(MAX_SERIES), strict=False)]
    sums = {"running": 0.0, "waiting": 0.0, "queries": 0.0, "hits": 0.0}
    kv: float | None = None
    series = 0
    body = b"\n".join(lines).decode("utf-8", "replace") + "\n"
    for family in text_string_to_metric_families(body):
        for sample in family.samples:
            found = _NAME.match(sample.name)
            if found is None or not _labels_match(sample.labels, labels):
                continue
            number = sample.value
            if not math.isfinite(number):
                continue
            series += 1
            what = found.group(1)
            if what == "num_requests_running":
                sums["running"] += number
            elif what == "num_requests_waiting":
                sums["waiting"] += number
            elif what in ("kv_cache_usage_perc", "gpu_cache_usage_perc"):
                kv = number if kv is None else max(kv, number)
            elif what == "prefix_cache_queries":
                sums["queries"] += number
            else:
                sums["hits"] += number
    return EngineReading(
        sums["running"], sums["waiting"], kv, sums["queries"], sums["hits"], series
    )


def _labels_match(have: Mapping[str, str], want: Mapping[str, str]) -> bool:
    return all(have.get(k) == v for k, v in want.items())


class EngineGauges:
    """The latest reading of one pool's engines, and how fresh it is."""

    def __init__(self, max_age: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.max_age = max_age
        self._clock = clock
        self.latest: EngineReading | None = None
        self.previous: EngineReading | None = None
        self.last_error: str | None = None

    def put(self, reading: EngineReading) -> None:
        self.previous, self.latest = self.latest, _stamped(reading, self._clock())
        self.last_error = None

    def failed(self, reason: str) -> None:
        self.last_error = reason

    def age(self) -> float | None:
        """Seconds since the last good reading; None when there was none."""
        return None if self.latest is None else self._clock() - self.latest.at

    def fresh(self) -> EngineReading | None:
        """The latest reading while it is within ``max_age`` and found an engine, else None."""
        latest = self.latest
        if latest is None or latest.series == 0 or self._clock() - latest.at > self.max_age:
            return None
        return latest

    def hit_rate(self) -> float | None:
        """The prefix cache's hit rate between the last two readings (tokens hit / queried)."""
        latest, previous = self.latest, self.previous
        if latest is None or previous is None:
            return None
        queries = latest.prefix_queries - previous.prefix_queries
        if queries <= 0:
            return None
        return max(0.0, min(1.0, (latest.prefix_hits - previous.prefix_hits) / queries))


def _stamped(reading: EngineReading, at: float) -> EngineReading:
    return EngineReading(
        reading.running,
        reading.waiting,
        reading.kv_usage,
        reading.prefix_queries,
        reading.prefix_hits,
        reading.series,
        at,
    )


async def scrape_once(
    gauges: EngineGauges, urls: tuple[str, ...], labels: Mapping[str, str], fetch: Fetch
) -> None:
    """Read every endpoint of a pool and sum them into one reading; any failure marks the
    reading failed (it then goes stale, and routing falls back to the gateway's own view)."""
    try:
        bodies = await asyncio.gather(*(fetch(url) for url in urls))
        readings = [parse_engine_metrics(body, labels) for body in bodies]
    except Exception as err:  # unreadable or unparsable: a missing signal, never an error
        gauges.failed(type(err).__name__)
        return
    gauges.put(_summed(readings))


def _summed(readings: list[EngineReading]) -> EngineReading:
    kvs = [r.kv_usage for r in readings if r.kv_usage is not None]
    return EngineReading(
        sum(r.running for r in readings),
        sum(r.waiting for r in readings),
        max(kvs) if kvs else None,
        sum(r.prefix_queries for r in readings),
        sum(r.prefix_hits for r in readings),
        sum(r.series for r in readings),
    )


async def scrape_forever(
    gauges: EngineGauges,
    urls: tuple[str, ...],
    labels: Mapping[str, str],
    fetch: Fetch,
    interval: float,
    stopped: Callable[[], bool],
) -> None:
    """Scrape every ``interval`` seconds until cancelled or ``stopped()`` (a retired pool)."""
    while not stopped():
        try:
            await scrape_once(gauges, urls, labels, fetch)
        except Exception as err:  # a parser bug must not end the scraping: logged, marked stale
            logger.exception("engine metrics scrape failed")
            gauges.failed(type(err).__name__)
        await asyncio.sleep(interval)
