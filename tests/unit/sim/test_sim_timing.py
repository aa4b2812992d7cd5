"""The timing model: prefill grows with the prompt, decode honours the interval and the load.

Bounds are loose on the slow side (a shared 2-core machine) and firm on the fast side: the
simulator must never be early (beyond the event loop's timer grain, GRAIN).
"""

from __future__ import annotations

import asyncio
import itertools
import statistics
import time

import httpx

from tests.simproc import SimProcess, start_sim

# A lower bound on a simulated delay allows for the event loop's timer grain: a timer may fire up
# to a millisecond early (the simulator once recorded 0.33999 s for a 0.340 s prefill).
GRAIN = 0.002


async def stream_timings(
    sim: SimProcess, prompt: str, max_tokens: int, headers: dict[str, str] | None = None
) -> tuple[float, list[float]]:
    """Seconds to the first token chunk, and the arrival time of every token chunk."""
    body = {"prompt": prompt, "max_tokens": max_tokens, "stream": True}
    arrivals: list[float] = []
    async with httpx.AsyncClient(timeout=30) as h:
        start = time.perf_counter()
        async with h.stream("POST", sim.base_url + "/completions", json=body, headers=headers) as r:
            async for line in r.aiter_lines():
                if line.startswith("data: {"):
                    arrivals.append(time.perf_counter())
    return arrivals[0] - start, arrivals


def gaps(arrivals: list[float]) -> list[float]:
    return [b - a for a, b in itertools.pairwise(arrivals)]


async def test_ttft_grows_with_prompt_tokens(timed_sim: SimProcess) -> None:
    short_ttft, _ = await stream_timings(timed_sim, "hi", 1)
    long_ttft, _ = await stream_timings(timed_sim, " ".join(["w"] * 300), 1)
    # 40 ms + 1 ms/token: about 41 ms and 340 ms.
    assert short_ttft >= 0.040 - GRAIN
    assert long_ttft >= 0.340 - GRAIN
    assert long_ttft - short_ttft > 0.2
    short, long = timed_sim.wait_for_requests(2, done=True)
    assert long["first_token_at"] - long["received_at"] >= 0.340 - GRAIN
    assert (
        short["first_token_at"] - short["received_at"]
        < long["first_token_at"] - long["received_at"]
    )


async def test_chunk_spacing_honours_itl(timed_sim: SimProcess) -> None:
    _, arrivals = await stream_timings(timed_sim, "hi", 6)
    spacing = gaps(arrivals)
    assert len(spacing) == 5
    assert min(spacing) >= 0.025  # 30 ms, minus the client's own jitter
    assert statistics.median(spacing) < 0.090


async def test_header_overrides_shape_one_request(timed_sim: SimProcess) -> None:
    headers = {"x-sim-ttft-ms": "250", "x-sim-itl-ms": "80"}
    ttft, arrivals = await stream_timings(timed_sim, "hi", 3, headers)
    assert ttft >= 0.250 - GRAIN
    # The span of the decode, not each gap: a busy machine may deliver two chunks in one read,
    # which shortens one gap and lengthens the next, never the whole.
    assert arrivals[-1] - arrivals[0] >= 2 * 0.080 * 0.95
    plain_ttft, _ = await stream_timings(timed_sim, "hi", 1)
    assert plain_ttft < ttft - 0.1  # the headers shaped that one request only


async def test_concurrent_decodes_slow_each_other(timed_sim: SimProcess) -> None:
    _, alone = await stream_timings(timed_sim, "hi", 6)
    together = await asyncio.gather(*(stream_timings(timed_sim, "hi", 6) for _ in range(4)))
    alone_gap = statistics.median(gaps(alone))
    # With 4 decodes: 30 + 25 * 3 = 105 ms per token instead of 30 ms.
    crowded_gap = statistics.median(g for _, arrivals in together for g in gaps(arrivals))
    assert crowded_gap >= 0.090
    assert crowded_gap > 2 * alone_gap


async def test_non_streaming_waits_the_whole_generation(timed_sim: SimProcess) -> None:
    async with httpx.AsyncClient(timeout=30) as h:
        start = time.perf_counter()
        r = await h.post(timed_sim.base_url + "/completions", json={"prompt": "hi"})
        elapsed = time.perf_counter() - start
    assert r.status_code == 200
    # 41 ms prefill + 5 intervals of 30 ms for the default 6 tokens.
    assert elapsed >= 0.041 + 5 * 0.030 - GRAIN


async def test_no_delay_answers_at_once_even_with_slow_settings() -> None:
    with start_sim("--no-delay", "--ttft-base-ms", "5000", "--itl-ms", "5000") as sim:
        ttft, arrivals = await stream_timings(sim, "hi", 5)
        assert arrivals[-1] - arrivals[0] + ttft < 1.0
