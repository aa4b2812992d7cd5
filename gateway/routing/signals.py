"""Keeps every pool's engine gauges fresh: one scraping task per endpoint a pool names.

A pool's ``signals.metrics_urls`` (on Ray Serve LLM, Ray's metrics export) feed the pool's
readings in the load book (``book.engine(pool)``); ``signals.replica_metrics`` reads each
replica's own ``/metrics`` into its readings there (``book.engine(pool, replica.label)``). The
tasks end with the pool (a reload that retires it) or at :meth:`EngineSignals.aclose`::

    signals = EngineSignals()
    tasks = signals.watch(pool)        # started; the caller cancels them at shutdown
    await signals.aclose()

The HTTP client is the gateway's own upstream client (``Http1Upstream``, in its base install),
one of its own, kept apart from the pools' clients: a slow metrics endpoint never takes a
connection a request could use. Each scrape is bounded in time (``signals.timeout``) and size
(``MAX_BODY_BYTES``).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from gateway.routing.gauges import MAX_BODY_BYTES, Fetch, scrape_forever
from gateway.routing.pools import Pool
from gateway.upstream.config import Timeouts
from gateway.upstream.http1 import Http1Upstream


@dataclass(frozen=True)
class _ScraperSettings:
    """The scraping client's settings (``UpstreamSettings``); each scrape has its own deadline."""

    timeouts: Timeouts
    max_connections: int = 64


class EngineSignals:
    def __init__(self, fetch: Fetch | None = None) -> None:
        self._fetch = fetch
        self._client: Http1Upstream | None = None

    def watch(self, pool: Pool) -> list[asyncio.Task[None]]:
        signals = pool.config.signals
        fetch = self._fetch or self._http_fetch(signals.timeout)
        tasks = []

        def retired() -> bool:
            return pool.retired

        book = pool.book
        if signals.metrics_urls:
            gauges = book.engine(pool.name)
            scrape = scrape_forever(
                gauges, signals.metrics_urls, signals.labels, fetch, signals.interval, retired
            )
            tasks.append(asyncio.create_task(scrape))
        for replica in pool.replicas:
            if book.has_replica_gauges(pool.name, replica.label):
                gauges = book.engine(pool.name, replica.label)
                url = (replica.url + "/metrics",)
                scrape = scrape_forever(
                    gauges, url, signals.labels, fetch, signals.interval, retired
                )
                tasks.append(asyncio.create_task(scrape))
        return tasks

    def _http_fetch(self, timeout: float) -> Fetch:
        async def fetch(url: str) -> bytes:
            if self._client is None:
                self._client = Http1Upstream(_ScraperSettings(Timeouts()))
            async with asyncio.timeout(timeout):
                status, body = await self._client.get(url, MAX_BODY_BYTES)
            if status >= 300:
                raise RuntimeError(f"status {status}")
            return body

        return fetch

    async def aclose(self) -> None:
        if self._client is not None:
            await self._client.aclose()
            self._client = None
