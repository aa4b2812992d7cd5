"""Streams: incremental, cancelled by a leaving client, ended on upstream failure."""

from __future__ import annotations

import itertools
import json
import statistics
import time
from pathlib import Path

import httpx
import openai
import pytest

from tests.gatewayproc import GatewayProcess, start_gateway
from tests.integration.proxy.conftest import MODEL, gateway_config
from tests.simproc import SimProcess, start_sim

# vLLM's ignore_eos: the simulator streams the whole cap, so a stream lasts as long as its
# max_tokens x the pacing says (the natural answer, 16 tokens, would end these streams early).
CHAT = {
    "model": MODEL,
    "messages": [{"role": "user", "content": "hi"}],
    "stream": True,
    "ignore_eos": True,
}


def test_chunks_arrive_spaced_as_the_upstream_sends_them(gateway: GatewayProcess) -> None:
    arrivals = []
    with openai.OpenAI(base_url=gateway.base_url, api_key="x", max_retries=0) as client:
        stream = client.chat.completions.create(
            model=MODEL,
            messages=CHAT["messages"],
            max_tokens=8,
            stream=True,
            extra_headers={"x-sim-itl-ms": "50", "x-sim-ttft-ms": "10"},
        )
        for chunk in stream:
            if chunk.choices and chunk.choices[0].delta.content:
                arrivals.append(time.perf_counter())
    gaps = [b - a for a, b in itertools.pairwise(arrivals)]
    assert len(gaps) == 7
    # Buffering would deliver everything in one burst at the end (every gap near zero). On a
    # loaded machine one late chunk shortens the next gap, so judge the median and the spread.
    assert statistics.median(gaps) > 0.035, gaps
    assert arrivals[-1] - arrivals[0] > 0.25, gaps


def test_client_disconnect_cancels_the_upstream_request(
    gateway: GatewayProcess, sim: SimProcess
) -> None:
    sim.reset()
    headers = {"x-sim-itl-ms": "100", "x-sim-ttft-ms": "0", "x-request-id": "leaver-1"}
    with (
        httpx.Client(timeout=10) as client,
        client.stream(
            "POST",
            gateway.base_url + "/chat/completions",
            json={**CHAT, "max_tokens": 50},
            headers=headers,
        ) as response,
    ):
        assert response.status_code == 200
        for line in response.iter_lines():
            if line.startswith("data: ") and '"content":"' in line and '"content":""' not in line:
                break
        left_at = time.time()
    record = _wait_settled(sim, "leaver-1")
    assert record["cancelled"], record
    assert record["cancelled_at"] - left_at < 0.100
    assert record["chunks_sent"] < 50


def test_upstream_dying_mid_stream_ends_the_stream_with_an_error_event(
    gateway: GatewayProcess,
) -> None:
    with (
        openai.OpenAI(base_url=gateway.base_url, api_key="x", max_retries=0) as client,
        pytest.raises(openai.APIError) as err,
    ):
        for _ in client.chat.completions.create(
            model=MODEL,
            messages=CHAT["messages"],
            max_tokens=20,
            stream=True,
            extra_headers={"x-sim-fail-after": "3"},
        ):
            pass
    assert "upstream" in str(err.value).lower()


def test_killed_upstream_process_mid_stream(tmp_path: Path) -> None:
    with (
        start_sim("--model", MODEL, "--itl-ms", "50") as sim,
        start_gateway(gateway_config(sim.url), tmp_path) as gateway,
    ):
        events = []
        with (
            httpx.Client(timeout=10) as client,
            client.stream(
                "POST", gateway.base_url + "/chat/completions", json={**CHAT, "max_tokens": 100}
            ) as response,
        ):
            for line in response.iter_lines():
                if not line.startswith("data: "):
                    continue
                events.append(line[6:])
                if len(events) == 3:
                    sim.proc.kill()
        last = json.loads(events[-1])
        assert last["error"]["code"] == "upstream_error"
        assert "[DONE]" not in events


def test_idle_upstream_mid_stream_times_out_with_an_error_event(gateway: GatewayProcess) -> None:
    # The module's gateway allows 0.5 s between chunks; this upstream pauses 2 s.
    events = _stream_events(gateway, max_tokens=3, itl_ms=2000)
    error = json.loads(events[-1])["error"]
    assert error["code"] == "timeout" and error["type"] == "server_error"


def _stream_events(gateway: GatewayProcess, *, max_tokens: int, itl_ms: int) -> list[str]:
    """The ``data:`` payloads of one streamed chat whose tokens the simulator spaces ``itl_ms``."""
    with (
        httpx.Client(timeout=10) as client,
        client.stream(
            "POST",
            gateway.base_url + "/chat/completions",
            json={**CHAT, "max_tokens": max_tokens},
            headers={"x-sim-itl-ms": str(itl_ms), "x-sim-ttft-ms": "0"},
        ) as response,
    ):
        assert response.status_code == 200
        return [line[6:] for line in response.iter_lines() if line.startswith("data: ")]


def _wait_settled(sim: SimProcess, request_id: str, timeout: float = 5) -> dict[str, object]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for record in sim.requests():
            if record["client_request_id"] == request_id and (
                record["cancelled"] or record["completed_at"]
            ):
                return record
        time.sleep(0.01)
    raise AssertionError(f"{request_id} never settled: {sim.requests()}")


def test_total_deadline_ends_a_slow_but_steady_stream(sim: SimProcess, tmp_path: Path) -> None:
    config = gateway_config(sim.url, timeouts={"idle": 5, "total": 0.5})
    with start_gateway(config, tmp_path) as gateway:
        events = _stream_events(gateway, max_tokens=40, itl_ms=50)
    error = json.loads(events[-1])["error"]
    assert error["code"] == "timeout" and "0.5s" in error["message"]
    assert 5 < len(events) < 20  # some tokens made it before the deadline
