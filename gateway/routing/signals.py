"""Keeps every pool's engine gauges fresh: one scraping task per endpoint a pool names.

A pool's ``signals.metrics_urls`` (on Ray Serve LLM, Ray's metrics export) feed ``pool.gauges``;
``signals.replica_metrics`` reads each replica's own ``/metrics`` into ``replica.gauges``. The
tasks end with the pool (a reload that retires it) or at :meth:`EngineSignals.aclose`::

    signals = EngineSignals()
    tasks = signals.watch(pool)        # started; the caller cancels them at shutdown
    await signals.aclose()

The HTTP client is aiohttp's, kept apart from the pools' upstream clients: a slow metrics
endpoint never takes a connection a request could use. Bodies are bounded (``MAX_BODY_BYTES``).
"""

from __future__ import annotations

import asyncio

import aiohttp

from gateway.routing.gauges import MAX_BODY_BYTES, Fetch, scrape_forever
from gateway.routing.pools import Pool


class EngineSignals:
    def __init__(self, fetch: Fetch | None = None) -> None:
        self._fetch = fetch
        self._session: aiohttp.ClientSession | None = None

    def watch(self, pool: Pool) -> list[asyncio.Task[None]]:
        signals = pool.config.signals
        fetch = self._fetch or self._http_fetch(signals.timeout)
        tasks = []

        def retired() -> bool:
            return pool.retired

        if signals.metrics_urls:
            scrape = scrape_forever(
                pool.gauges, signals.metrics_urls, signals.labels, fetch, signals.interval, retired
            )
            tasks.append(asyncio.create_task(scrape))
        for replica in pool.replicas:
            if replica.gauges is not None:
                url = (replica.url + "/metrics",)
                scrape = scrape_forever(
                    replica.gauges, url, signals.labels, fetch, signals.interval, retired
                )
                tasks.append(asyncio.create_task(scrape))
        return tasks

    def _http_fetch(self, timeout: float) -> Fetch:
        async def fetch(url: str) -> bytes:
            if self._session is None:
                self._session = aiohttp.ClientSession()
            limit = aiohttp.ClientTimeout(total=timeout)
            async with self._session.get(url, timeout=limit) as response:
                if response.status >= 300:
                    raise RuntimeError(f"status {response.status}")
                body = bytearray()
                async for chunk in response.content.iter_any():
                    body += chunk
                    if len(body) > MAX_BODY_BYTES:
                        raise RuntimeError("metrics body too large")
                return bytes(body)

        return fetch

    async def aclose(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None
