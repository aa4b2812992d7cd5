"""Hammered concurrently, admission stays within the limit: three gateway processes sharing one
real Redis by at most 1%, one process with the in-process backend by zero.

A bucket of limit L refilling L per minute admits at most L + L * t / 60 over t seconds; t is
measured around the whole load, so it covers the window the gateways saw.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.gatewayproc import GatewayProcess, start_gateway
from tests.integration.limits.limitsetup import MODEL, limited_config, no_delay_sim
from tests.redisserver import RedisServer, spawn_redis

RPM = 300
TPM = 30_000


@pytest.fixture(scope="module")
def redis_server() -> Iterator[RedisServer]:
    server = spawn_redis()
    yield server
    server.stop()


async def hammer(
    urls: list[str], total: int, concurrency: int, max_tokens: int = 20
) -> tuple[list[dict[str, Any]], float]:
    """``total`` chat requests spread over ``urls``; the usage of each admitted one, and time."""
    admitted: list[dict[str, Any]] = []
    refused = 0
    queue = iter(range(total))
    limits = httpx.Limits(max_connections=concurrency)
    async with httpx.AsyncClient(timeout=30, limits=limits) as client:

        async def worker() -> None:
            nonlocal refused
            for i in queue:
                body = {
                    "model": MODEL,
                    "messages": [{"role": "user", "content": f"request number {i}"}],
                    "max_tokens": max_tokens,
                    "ignore_eos": True,  # vLLM's: the simulator fills the cap it was given
                }
                response = await client.post(urls[i % len(urls)] + "/chat/completions", json=body)
                if response.status_code == 200:
                    admitted.append(response.json()["usage"])
                else:
                    assert response.status_code == 429, response.text
                    refused += 1

        started = time.monotonic()
        await asyncio.gather(*(worker() for _ in range(concurrency)))
        elapsed = time.monotonic() - started
    assert refused > 0, "the load must exceed the limit"
    return admitted, elapsed


def bound(limit: int, elapsed: float) -> float:
    return limit + limit * elapsed / 60


def gateways(stack: ExitStack, config: dict[str, Any], tmp_path: Path, n: int) -> list[str]:
    started: list[GatewayProcess] = []
    for i in range(n):
        folder = tmp_path / f"gw{i}"
        folder.mkdir()
        started.append(stack.enter_context(start_gateway(config, folder)))
    return [g.base_url for g in started]


@pytest.mark.parametrize("limit", ["requests", "tokens"])
def test_three_replicas_on_one_redis_admit_within_one_percent(
    limit: str, redis_server: RedisServer, tmp_path: Path
) -> None:
    defaults = {"requests_per_minute": RPM} if limit == "requests" else {"tokens_per_minute": TPM}
    limits = {
        "backend": "redis",
        "redis_url": redis_server.url,
        "key_prefix": f"load-{limit}",
        "defaults": defaults,
    }
    with ExitStack() as stack:
        sim = stack.enter_context(no_delay_sim())
        config = limited_config(sim.url, tmp_path, limits=limits)
        urls = gateways(stack, config, tmp_path, 3)
        max_tokens = 20 if limit == "requests" else 100  # ~110 tokens: ~270 fit in the bucket
        admitted, elapsed = asyncio.run(hammer(urls, 900, 48, max_tokens))
    if limit == "requests":
        assert RPM <= len(admitted) <= bound(RPM, elapsed) * 1.01
    else:
        used = sum(u["total_tokens"] for u in admitted)
        # Reservations run ahead of usage; what is admitted and settled stays within the bucket.
        assert used <= bound(TPM, elapsed) * 1.01
        assert used >= TPM * 0.9


@pytest.mark.parametrize("limit", ["requests", "tokens"])
def test_one_process_in_memory_admits_not_one_over(limit: str, tmp_path: Path) -> None:
    defaults = {"requests_per_minute": RPM} if limit == "requests" else {"tokens_per_minute": TPM}
    with (
        no_delay_sim() as sim,
        start_gateway(
            limited_config(sim.url, tmp_path, limits={"defaults": defaults}), tmp_path
        ) as gateway,
    ):
        max_tokens = 20 if limit == "requests" else 100
        admitted, elapsed = asyncio.run(hammer([gateway.base_url], 600, 48, max_tokens))
    if limit == "requests":
        assert RPM <= len(admitted) <= int(bound(RPM, elapsed))
    else:
        # Settled to the upstream's usage: what was used never passes the bucket's bound.
        used = sum(u["total_tokens"] for u in admitted)
        assert TPM * 0.9 <= used <= bound(TPM, elapsed)
