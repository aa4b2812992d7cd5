"""Two real gateway processes sharing one load book on a real Redis (``load_sharing``, issue 35):
a request starting on one counts against the pool's ``max_starting`` on the other, and a
conversation's next turn sent to the other gateway goes to the replica the first one sent its
prompt to (the prefix hints)."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.gatewayproc import GatewayProcess, start_gateway
from tests.integration.routing.conftest import MODEL, SIM_ARGS, STEERING
from tests.redisserver import RedisServer, redis_available, spawn_redis
from tests.simproc import SimProcess, start_sim

pytestmark = pytest.mark.skipif(not redis_available(), reason="needs redis-server")


@pytest.fixture
def redis_server() -> Iterator[RedisServer]:
    server = spawn_redis()
    yield server
    server.stop()


def config(urls: list[str], redis_url: str, **pool: Any) -> dict[str, Any]:
    return {
        "load_sharing": {"backend": "redis", "redis_url": redis_url, "key_prefix": "it"},
        "pools": {
            "colo": {
                "urls": urls,
                "forward_headers": STEERING,
                "health": {"interval": 0.5, "timeout": 5},
                "timeouts": {"first_byte": 60, "idle": 60},
                **pool,
            }
        },
        "models": {MODEL: {"pool": "colo", "routing": {"prefix": {"enabled": True}}}},
    }


def load_of(gw: GatewayProcess) -> dict[str, Any]:
    pools: dict[str, Any] = httpx.get(gw.url + "/admin/routing", timeout=5).json()["pools"]
    return pools["colo"]  # type: ignore[no-any-return]


async def until(check: Callable[[], bool], what: str, seconds: float = 30) -> None:
    deadline = time.monotonic() + seconds
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"never saw {what}")
        await asyncio.sleep(0.05)


async def test_a_start_on_one_gateway_bounds_the_other(
    tmp_path: Path, redis_server: RedisServer
) -> None:
    with start_sim(*SIM_ARGS) as sim:
        shared = config([sim.url], redis_server.url, saturation={"max_starting": 1})
        with start_gateway(shared, tmp_path) as a, start_gateway(shared, tmp_path) as b:
            body = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}]}
            slow = {**body, "stream": True, "max_tokens": 4}
            async with httpx.AsyncClient(timeout=60) as client:
                held = client.stream(
                    "POST", a.base_url + "/chat/completions", json=slow,
                    headers={"x-sim-ttft-ms": "60000"},
                )  # fmt: skip
                async with contextlib.AsyncExitStack() as stack:
                    started = asyncio.create_task(stack.enter_async_context(held))
                    await until(lambda: load_of(b)["other_gateways"]["starting"] == 1, "a's start")
                    refused = await client.post(b.base_url + "/chat/completions", json=slow)
                    assert refused.status_code == 503, refused.text
                    assert "saturated" in refused.json()["error"]["message"]
                    started.cancel()  # the client leaves before the first token
                    with contextlib.suppress(asyncio.CancelledError, httpx.HTTPError):
                        await started
                await until(lambda: load_of(b)["other_gateways"]["starting"] == 0, "it end")
                served = await client.post(b.base_url + "/chat/completions", json=slow)
                assert served.status_code == 200


def more_blocks(gw: GatewayProcess, known: int) -> Callable[[], bool]:
    return lambda: load_of(gw)["prefix_index_blocks"] > known


def replica_of(sims: list[SimProcess], content: str) -> int:
    """Which simulator got the request whose last message is ``content``."""
    for n, sim in enumerate(sims):
        for seen in sim.requests():
            messages = seen.get("body", {}).get("messages") or []
            if messages and messages[-1].get("content") == content:
                return n
    raise AssertionError(f"no simulator got {content!r}")


async def test_a_conversation_follows_its_replica_across_gateways(
    tmp_path: Path, redis_server: RedisServer
) -> None:
    with start_sim(*SIM_ARGS) as one, start_sim(*SIM_ARGS) as two:
        sims = [one, two]
        shared = config([one.url, two.url], redis_server.url)
        with start_gateway(shared, tmp_path) as a, start_gateway(shared, tmp_path) as b:
            async with httpx.AsyncClient(timeout=30) as client:
                for n in range(4):  # each conversation starts on a, goes on through b
                    known = load_of(b)["prefix_index_blocks"]
                    system = {"role": "system", "content": f"You answer briefly, {n}. " * 60}
                    first = [system, {"role": "user", "content": f"question {n} " * 8}]
                    body = {"model": MODEL, "messages": first, "max_tokens": 4}
                    answer = await client.post(a.base_url + "/chat/completions", json=body)
                    assert answer.is_success
                    sent_to = replica_of(sims, first[-1]["content"])
                    # b learns a's blocks (its own index knew none of this prompt's).
                    await until(more_blocks(b, known), "a's hints on b")
                    follow = [*first, {"role": "assistant", "content": "ok"},
                              {"role": "user", "content": f"and then {n}?"}]  # fmt: skip
                    body = {"model": MODEL, "messages": follow, "max_tokens": 4}
                    # b's own choice would rotate; its shared index says where the prefix is.
                    answer = await client.post(b.base_url + "/chat/completions", json=body)
                    assert answer.is_success
                    assert replica_of(sims, follow[-1]["content"]) == sent_to
