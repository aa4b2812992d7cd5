"""The simulator's KV link: a PD pool's transfers share ``kv_transfer_parallel`` places.

Bounds here are lower bounds on time slept (asyncio.sleep never returns early), so a loaded
machine cannot fail them; without the link's queue the second transfer would overlap the first.
"""

from __future__ import annotations

import asyncio

from serve_app.sim.capacity import CapacitySettings
from serve_app.sim.engine import SimEngine
from serve_app.sim.vllm_metrics import VllmMetrics

TRANSFER_MS_PER_TOKEN = 2.0
PROMPT = [f"t{i}" for i in range(40)]  # 40 tokens: an 80 ms transfer each


class RecordedMetrics(VllmMetrics):
    def __init__(self) -> None:
        super().__init__("sim-model")
        self.ttfts: list[float] = []

    def observe_ttft(self, seconds: float) -> None:
        self.ttfts.append(seconds)
        super().observe_ttft(seconds)


async def _two_requests(parallel: int) -> list[float]:
    capacity = CapacitySettings(
        step_ms=0.0,
        prefill_per_token_ms=0.0,
        decode_per_seq_ms=0.0,
        kv_transfer_per_token_ms=TRANSFER_MS_PER_TOKEN,
        kv_transfer_parallel=parallel,
    )
    metrics = RecordedMetrics()
    engine = SimEngine(capacity, metrics)

    async def one(prefix: str) -> None:
        async with engine.request([prefix + t for t in PROMPT], max_tokens=2) as run:
            async for _ in run.tokens():
                pass

    try:
        await asyncio.gather(one("a"), one("b"))
    finally:
        await engine.aclose()
    return sorted(metrics.ttfts)


def test_one_transfer_at_a_time_queues_the_second_behind_the_first() -> None:
    transfer_s = TRANSFER_MS_PER_TOKEN * len(PROMPT) / 1000
    ttfts = asyncio.run(_two_requests(parallel=1))
    assert len(ttfts) == 2
    assert ttfts[0] >= transfer_s
    assert ttfts[1] >= 2 * transfer_s  # it waited for the link, and the TTFT says so


def test_any_number_at_once_still_charges_each_transfer() -> None:
    transfer_s = TRANSFER_MS_PER_TOKEN * len(PROMPT) / 1000
    ttfts = asyncio.run(_two_requests(parallel=0))
    assert len(ttfts) == 2 and min(ttfts) >= transfer_s


def test_a_negative_link_width_is_refused() -> None:
    import pytest

    with pytest.raises(ValueError):
        CapacitySettings(kv_transfer_parallel=-1)
