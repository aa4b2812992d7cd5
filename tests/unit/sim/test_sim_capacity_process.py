"""The capacity model in a real simulator process: vLLM's gauges on /metrics move as load comes
and goes, and a repeated prefix comes back as ``usage.prompt_tokens_details.cached_tokens``.

No timing assertions: the tests poll /metrics for a state, with a generous deadline.
"""

from __future__ import annotations

import asyncio
import re
import time
from collections.abc import Iterator

import httpx
import openai
import pytest

from tests.simproc import SimProcess, spawn_sim

LABELS = '{engine="0",model_name="sim-model"}'


@pytest.fixture(scope="module")
def capacity_sim() -> Iterator[SimProcess]:
    # Two sequences at most; slow decode steps, so that requests stay in the batch a while.
    # 600 blocks of 4 tokens: room for two requests of 1000 output tokens.
    sim = spawn_sim(
        "--capacity",
        "--max-num-seqs",
        "2",
        "--block-size",
        "4",
        "--num-gpu-blocks-override",
        "600",
        "--step-ms",
        "20",
        "--max-model-len",
        "4096",
    )
    yield sim
    sim.stop()


def gauges(sim: SimProcess) -> dict[str, float]:
    body = httpx.get(sim.url + "/metrics", timeout=10).text
    out = {}
    for name in (
        "vllm:num_requests_running",
        "vllm:num_requests_waiting",
        "vllm:kv_cache_usage_perc",
        "vllm:prefix_cache_queries_total",
        "vllm:prefix_cache_hits_total",
    ):
        match = re.search(re.escape(name + LABELS) + r" (\S+)", body)
        assert match, f"{name} missing from /metrics:\n{body[:2000]}"
        out[name] = float(match.group(1))
    return out


def wait_for(sim: SimProcess, want: dict[str, float], timeout: float = 30.0) -> dict[str, float]:
    deadline = time.monotonic() + timeout
    while True:
        seen = gauges(sim)
        if all(seen[k] == v for k, v in want.items()):
            return seen
        if time.monotonic() > deadline:
            raise AssertionError(f"gauges {seen} never reached {want}")
        time.sleep(0.02)


async def test_running_and_waiting_gauges_follow_the_load(capacity_sim: SimProcess) -> None:
    wait_for(capacity_sim, {"vllm:num_requests_running": 0, "vllm:num_requests_waiting": 0})
    body = {
        "model": "sim-model",
        "messages": [{"role": "user", "content": "keep talking"}],
        "max_tokens": 1000,
        "stream": True,
    }
    async with httpx.AsyncClient(base_url=capacity_sim.url, timeout=60) as client:

        async def stream() -> None:
            async with client.stream("POST", "/v1/chat/completions", json=body) as r:
                async for _ in r.aiter_bytes():
                    pass

        tasks = [asyncio.create_task(stream()) for _ in range(5)]
        try:
            seen = await asyncio.to_thread(
                wait_for,
                capacity_sim,
                {"vllm:num_requests_running": 2, "vllm:num_requests_waiting": 3},
            )
            assert 0 < seen["vllm:kv_cache_usage_perc"] <= 1
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
    # The clients left: the engine drops their requests and frees their blocks.
    await asyncio.to_thread(
        wait_for,
        capacity_sim,
        {
            "vllm:num_requests_running": 0,
            "vllm:num_requests_waiting": 0,
            "vllm:kv_cache_usage_perc": 0,
        },
    )


def test_a_conversations_history_is_served_from_the_prefix_cache(
    capacity_sim: SimProcess,
) -> None:
    client = openai.OpenAI(base_url=capacity_sim.base_url, api_key="x")
    history = [{"role": "user", "content": " ".join(f"w{i}" for i in range(40))}]
    before = gauges(capacity_sim)
    first = client.chat.completions.create(model="sim-model", messages=history, max_tokens=2)
    assert first.usage is not None and first.usage.prompt_tokens_details is not None
    assert first.usage.prompt_tokens_details.cached_tokens == 0
    turn = [*history, {"role": "assistant", "content": "ok"}, {"role": "user", "content": "more"}]
    stream = client.chat.completions.create(
        model="sim-model",
        messages=turn,
        max_tokens=2,
        stream=True,
        stream_options={"include_usage": True},
    )
    usage = next(c.usage for c in stream if c.usage is not None)
    assert usage.prompt_tokens_details is not None
    # The first turn's 46 prompt tokens, less the reply opener, in whole blocks of 4.
    assert usage.prompt_tokens_details.cached_tokens == 44
    after = gauges(capacity_sim)
    assert after["vllm:prefix_cache_hits_total"] - before["vllm:prefix_cache_hits_total"] == 44
    queried = after["vllm:prefix_cache_queries_total"] - before["vllm:prefix_cache_queries_total"]
    assert queried == first.usage.prompt_tokens + usage.prompt_tokens


def test_a_request_larger_than_the_kv_cache_is_refused(capacity_sim: SimProcess) -> None:
    client = openai.OpenAI(base_url=capacity_sim.base_url, api_key="x")
    with pytest.raises(openai.BadRequestError, match="KV blocks"):
        client.completions.create(model="sim-model", prompt="a " * 2000, max_tokens=500)


def test_without_capacity_there_is_no_metrics_endpoint_and_no_cached_tokens() -> None:
    sim = spawn_sim("--no-delay")
    try:
        assert httpx.get(sim.url + "/metrics").status_code == 404
        r = httpx.post(
            sim.url + "/v1/completions", json={"model": "sim-model", "prompt": "hi"}
        ).json()
        assert "prompt_tokens_details" not in r["usage"]
    finally:
        sim.stop()
