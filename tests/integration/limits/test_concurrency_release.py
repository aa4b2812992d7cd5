"""A concurrency slot is held while a stream runs and freed when the client walks away, on both
backends: settlement runs even for a request torn down by a disconnect."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.gatewayproc import start_gateway
from tests.integration.limits.limitsetup import MODEL, limited_config
from tests.redisserver import RedisServer, spawn_redis
from tests.simproc import start_sim

# ignore_eos (vLLM's): the simulator streams all 400 tokens, so the first stream holds its slot
# for 8 s, not for its natural 16-token answer.
BODY = {
    "model": MODEL,
    "messages": [{"role": "user", "content": "hi"}],
    "max_tokens": 400,
    "ignore_eos": True,
}


@pytest.fixture(scope="module")
def redis_server() -> Iterator[RedisServer]:
    server = spawn_redis()
    yield server
    server.stop()


@pytest.mark.parametrize("backend", ["memory", "redis"])
def test_slot_frees_when_the_client_leaves(
    backend: str, redis_server: RedisServer, tmp_path: Path
) -> None:
    limits: dict[str, object] = {"defaults": {"concurrent_requests": 1}}
    if backend == "redis":
        limits |= {"backend": "redis", "redis_url": redis_server.url, "key_prefix": "conc"}
    zero = ["--ttft-base-ms", "0", "--ttft-per-token-ms", "0", "--itl-ms", "20"]
    with (
        start_sim("--model", MODEL, *zero) as sim,
        start_gateway(limited_config(sim.url, tmp_path, limits=limits), tmp_path) as gateway,
    ):
        url = gateway.base_url + "/chat/completions"
        with httpx.stream("POST", url, json={**BODY, "stream": True}, timeout=10) as first:
            assert first.status_code == 200
            lines = first.iter_lines()  # kept: dropping the iterator would close the stream
            next(lines)  # the stream is running: its slot is taken
            second = httpx.post(url, json={**BODY, "max_tokens": 1}, timeout=10)
            assert second.status_code == 429
            assert "concurrent requests" in second.json()["error"]["message"]
            assert second.json()["error"]["type"] == "requests"
            next(lines)
        # The client closed the stream after one line (8 s of tokens were still to come).
        deadline = time.monotonic() + 5
        while httpx.post(url, json={**BODY, "max_tokens": 1}, timeout=10).status_code != 200:
            assert time.monotonic() < deadline, "the slot was never freed"
            time.sleep(0.05)
        assert time.monotonic() < deadline
