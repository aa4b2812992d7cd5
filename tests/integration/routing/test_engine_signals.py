"""The engine-signal scraper against a real HTTP server: the capacity simulator's vLLM-named
``/metrics`` (serve_app/sim; a simulator, not an engine), read by the gateway's own upstream
client, with aiohttp made unimportable (it is only in the loadtest and dev extras, so the base
install must scrape without it).

No timing assertions: the tests poll for a state, with a generous deadline.
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager

import httpx
import pytest

from gateway.errors import UpstreamError
from gateway.routing.config import PoolConfig
from gateway.routing.pools import Pool
from gateway.routing.signals import EngineSignals
from gateway.upstream.http1 import Http1Upstream
from tests.simproc import SimProcess, spawn_sim


@pytest.fixture(scope="module")
def capacity_sim() -> Iterator[SimProcess]:
    # One sequence at a time, slow steps: a long stream holds the batch while the test looks.
    sim = spawn_sim(
        "--capacity", "--max-num-seqs", "1", "--step-ms", "20", "--max-model-len", "4096"
    )  # fmt: skip
    yield sim
    sim.stop()


@pytest.fixture(autouse=True)
def without_aiohttp(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "aiohttp", None)  # ``import aiohttp`` now raises


def scraped_pool(sim: SimProcess, metrics_url: str) -> Pool:
    config = PoolConfig.model_validate(
        {
            "urls": [sim.url],
            "signals": {
                "metrics_urls": [metrics_url],
                "replica_metrics": True,
                "labels": {"model_name": "sim-model"},
                "interval": 0.05,
                "timeout": 10,
                "max_age": 60,
            },
        }
    )
    return Pool("colocated", config)


async def until(check: Callable[[], bool], what: str, timeout: float = 60.0) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not check():
        if loop.time() > deadline:
            raise AssertionError(f"never reached: {what}")
        await asyncio.sleep(0.02)


@asynccontextmanager
async def watching(pool: Pool) -> AsyncIterator[None]:
    """The pool's scrapers run inside the block and are stopped, with their client, after it."""
    signals = EngineSignals()
    tasks = signals.watch(pool)
    try:
        yield
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await signals.aclose()


async def test_the_pool_and_its_replica_read_the_simulators_gauges(
    capacity_sim: SimProcess,
) -> None:
    with pytest.raises(ImportError):
        import aiohttp  # noqa: F401
    pool = scraped_pool(capacity_sim, capacity_sim.url + "/metrics")
    replica_gauges = pool.book.engine(pool.name, pool.replicas[0].label)
    assert replica_gauges is not None
    body = {
        "model": "sim-model",
        "messages": [{"role": "user", "content": "keep talking"}],
        "max_tokens": 2000,
        "stream": True,
    }
    async with watching(pool):
        await until(lambda: pool.book.engine(pool.name).fresh() is not None, "a fresh pool reading")
        reading = pool.book.engine(pool.name).fresh()
        assert reading is not None and reading.series >= 1  # the engine's series matched
        async with (
            httpx.AsyncClient(base_url=capacity_sim.url, timeout=60) as client,
            client.stream("POST", "/v1/chat/completions", json=body) as stream,
        ):
            assert stream.status_code == 200
            await until(
                lambda: (r := pool.book.engine(pool.name).fresh()) is not None and r.running == 1,
                "the stream counted as running in the pool's reading",
            )
            await until(
                lambda: (r := replica_gauges.fresh()) is not None and r.running == 1,
                "the stream counted as running in the replica's reading",
            )
        await until(
            lambda: (r := pool.book.engine(pool.name).fresh()) is not None and r.running == 0,
            "the stream gone from the reading once the client left",
        )
        assert pool.book.engine(pool.name).last_error is None


async def test_an_endpoint_that_answers_404_is_a_failed_reading_not_an_error(
    capacity_sim: SimProcess,
) -> None:
    pool = scraped_pool(capacity_sim, capacity_sim.url + "/no-metrics-here")
    async with watching(pool):
        await until(
            lambda: pool.book.engine(pool.name).last_error is not None, "the failed scrape noted"
        )
        assert pool.book.engine(pool.name).fresh() is None  # routing keeps the gateway's own view
        assert pool.saturation() is None


async def test_a_body_past_the_bound_is_refused_and_its_connection_dropped(
    capacity_sim: SimProcess,
) -> None:
    client = Http1Upstream(PoolConfig(urls=(capacity_sim.url,)))
    try:
        status, body = await client.get(capacity_sim.url + "/metrics", 1 << 20)
        assert status == 200 and b"vllm:num_requests_running" in body
        with pytest.raises(UpstreamError):
            await client.get(capacity_sim.url + "/metrics", 64)
        status, _ = await client.get(capacity_sim.url + "/metrics", 1 << 20)  # a new connection
        assert status == 200
    finally:
        await client.aclose()
