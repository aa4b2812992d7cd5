"""Cancellation, aborted connections and hangs, as the gateway's failure tests need them."""

from __future__ import annotations

import time

import httpx
import openai
import pytest

from tests.simproc import SimProcess

MESSAGES = [{"role": "user", "content": "Tell me a long story"}]


async def test_client_close_mid_stream_is_recorded_within_100ms(timed_sim: SimProcess) -> None:
    async with openai.AsyncOpenAI(base_url=timed_sim.base_url, api_key="sim") as c:
        stream = await c.chat.completions.create(
            model="sim-model",
            messages=MESSAGES,
            max_tokens=50,
            stream=True,
            # Long gaps between tokens: the close lands while the simulator sleeps.
            extra_headers={"x-sim-itl-ms": "1000", "x-request-id": "cancel-me"},
        )
        async for chunk in stream:
            if chunk.choices and chunk.choices[0].delta.content:
                break
        closed_at = time.time()
        await stream.close()
    record = _wait_cancelled(timed_sim, timeout=2.0)
    assert record["request_id"] == "cancel-me"
    assert record["cancelled_at"] - closed_at < 0.100
    assert record["completed_at"] is None
    assert record["chunks_sent"] == 1


def _wait_cancelled(sim: SimProcess, timeout: float) -> dict[str, object]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        records = sim.requests()
        if records and records[-1]["cancelled"]:
            return records[-1]
        time.sleep(0.005)
    raise AssertionError(f"no cancellation recorded: {sim.requests()}")


async def test_fail_after_aborts_the_stream_after_n_chunks(fast_sim: SimProcess) -> None:
    body = {"prompt": "hi", "max_tokens": 10, "stream": True}
    received: list[str] = []
    async with httpx.AsyncClient() as h:
        with pytest.raises(httpx.RemoteProtocolError):
            async with h.stream(
                "POST",
                fast_sim.base_url + "/completions",
                json=body,
                headers={"x-sim-fail-after": "3"},
            ) as r:
                assert r.status_code == 200
                async for line in r.aiter_lines():
                    if line.startswith("data: "):
                        received.append(line)
    assert len(received) == 3
    assert "[DONE]" not in "".join(received)
    [record] = fast_sim.wait_for_requests(1, done=True)
    assert (record["aborted"], record["chunks_sent"], record["cancelled"]) == (True, 3, False)


async def test_fail_after_breaks_the_openai_sdk_stream(fast_sim: SimProcess) -> None:
    contents: list[str] = []
    async with openai.AsyncOpenAI(base_url=fast_sim.base_url, api_key="sim") as c:
        stream = await c.chat.completions.create(
            model="sim-model",
            messages=MESSAGES,
            max_tokens=10,
            stream=True,
            extra_headers={"x-sim-fail-after": "2"},
        )
        # The SDK wraps the incomplete chunked body in its connection error.
        with pytest.raises(openai.APIConnectionError):
            async for chunk in stream:
                if chunk.choices and chunk.choices[0].delta.content:
                    contents.append(chunk.choices[0].delta.content)
    assert len(contents) == 2


async def test_fail_after_non_streaming_drops_the_connection(fast_sim: SimProcess) -> None:
    async with httpx.AsyncClient() as h:
        with pytest.raises(httpx.RemoteProtocolError):
            await h.post(
                fast_sim.base_url + "/completions",
                json={"prompt": "hi"},
                headers={"x-sim-fail-after": "0"},
            )
        # The simulator itself is fine afterwards.
        ok = await h.post(fast_sim.base_url + "/completions", json={"prompt": "hi"})
    assert ok.status_code == 200


async def test_hang_never_answers_and_records_the_client_leaving(fast_sim: SimProcess) -> None:
    async with httpx.AsyncClient() as h:
        with pytest.raises(httpx.ReadTimeout):
            await h.post(
                fast_sim.base_url + "/chat/completions",
                json={"messages": MESSAGES},
                headers={"x-sim-hang": "1"},
                timeout=0.3,
            )
    record = _wait_cancelled(fast_sim, timeout=2.0)
    assert record["completed_at"] is None
    assert record["status"] is None


async def test_non_streaming_cancel_is_recorded(timed_sim: SimProcess) -> None:
    async with httpx.AsyncClient() as h:
        with pytest.raises(httpx.ReadTimeout):
            await h.post(
                timed_sim.base_url + "/completions",
                json={"prompt": "hi"},
                headers={"x-sim-ttft-ms": "5000"},
                timeout=0.2,
            )
    record = _wait_cancelled(timed_sim, timeout=2.0)
    assert record["first_token_at"] is None
