"""Prompt-length routing, failover and recovery through a real gateway and two simulator pools."""

from __future__ import annotations

import time
from pathlib import Path

import openai
import pytest

from gateway.tokens import TokenizerConfig, build_token_counter
from gateway.wire.request import Operation
from tests.gatewayproc import GatewayProcess, start_gateway
from tests.integration.routing.conftest import (
    LONG,
    MODEL,
    SHORT,
    SIM_ARGS,
    STEERING,
    THRESHOLD,
    chat,
    length_routed_config,
)
from tests.simproc import SimProcess, spawn_sim, start_sim


def test_short_to_colocated_long_to_pd(
    pd_sim: SimProcess, colo_sim: SimProcess, tmp_path: Path
) -> None:
    with start_gateway(length_routed_config(pd_sim.url, colo_sim.url), tmp_path) as gw:
        short = chat(gw.base_url, SHORT)
        long = chat(gw.base_url, LONG)
        assert short.status_code == long.status_code == 200
        assert short.headers["x-gateway-pool"] == "colo"
        assert short.headers["x-gateway-route-reason"] == "prompt_short"
        assert short.headers["x-gateway-variant"] == "stable"
        assert long.headers["x-gateway-pool"] == "pd"
        assert long.headers["x-gateway-route-reason"] == "prompt_long"
        assert [r["body"]["messages"] for r in colo_sim.requests()] == [SHORT]
        assert [r["body"]["messages"] for r in pd_sim.requests()] == [LONG]
        _counted(gw, 2)
        logged = [e for e in gw.access_log() if e["path"] == "/v1/chat/completions"]
        assert [(e["pool"], e["routing_reason"]) for e in logged] == [
            ("colo", "prompt_short"),
            ("pd", "prompt_long"),
        ]
        assert logged[0]["prompt_tokens"] < 200 <= logged[1]["prompt_tokens"]


def test_threshold_edge_through_the_gateway(
    pd_sim: SimProcess, colo_sim: SimProcess, tmp_path: Path
) -> None:
    counter = build_token_counter(TokenizerConfig())  # what the gateway is configured with
    words = ["lorem"]
    while counter.count_request(Operation.CHAT, {"messages": _user(words)}) < THRESHOLD:
        words.append("lorem")
    at_threshold, just_under = _user(words), _user(words[:-1])
    assert counter.count_request(Operation.CHAT, {"messages": just_under}) == THRESHOLD - 1
    with start_gateway(length_routed_config(pd_sim.url, colo_sim.url), tmp_path) as gw:
        assert chat(gw.base_url, at_threshold).headers["x-gateway-pool"] == "pd"
        assert chat(gw.base_url, just_under).headers["x-gateway-pool"] == "colo"
        assert _counted(gw, 2) == [THRESHOLD, THRESHOLD - 1]


def _counted(gw: GatewayProcess, expected: int) -> list[int]:
    """Prompt tokens from the access log, which is written just after the response ends."""
    deadline = time.monotonic() + 5
    while True:
        counted = [e["prompt_tokens"] for e in gw.access_log() if e["prompt_tokens"]]
        if len(counted) >= expected or time.monotonic() > deadline:
            return counted
        time.sleep(0.05)


def _colo_reasons(gw: GatewayProcess, expected: int) -> set[str]:
    """Routing reasons of the colocated pool's requests, once ``expected`` of them are logged
    (the access log is written in batches)."""
    deadline = time.monotonic() + 5
    while True:
        logged = [e["routing_reason"] for e in gw.access_log() if e["pool"] == "colo"]
        if len(logged) >= expected or time.monotonic() > deadline:
            return set(logged)
        time.sleep(0.05)


def _user(words: list[str]) -> list[dict[str, str]]:
    return [{"role": "user", "content": " ".join(words)}]


def test_trusted_hint_overrides_length(
    pd_sim: SimProcess, colo_sim: SimProcess, tmp_path: Path
) -> None:
    with start_gateway(length_routed_config(pd_sim.url, colo_sim.url), tmp_path) as gw:
        hinted = chat(gw.base_url, SHORT, headers={"x-gateway-pool-hint": "pd"})
        assert (hinted.headers["x-gateway-pool"], hinted.headers["x-gateway-route-reason"]) == (
            "pd",
            "hint",
        )


def test_stopped_pool_fails_over_without_client_errors_and_comes_back(
    colo_sim: SimProcess, tmp_path: Path
) -> None:
    pd_sim = spawn_sim(*SIM_ARGS)
    port = pd_sim.port
    try:
        config = length_routed_config(pd_sim.url, colo_sim.url)
        with start_gateway(config, tmp_path) as gw:
            client = openai.OpenAI(base_url=gw.base_url, api_key="unused", max_retries=0)
            assert _served_by(client, LONG) == "pd"
            pd_sim.stop()
            # Straight away: before any health check noticed, requests must not fail.
            for _ in range(5):
                assert _served_by(client, LONG) == "colo"
                assert _streamed_by(client, LONG) == "colo"
            reasons = _colo_reasons(gw, expected=10)
            assert reasons and reasons <= {
                "prompt_long+failover_failed",
                "prompt_long+failover_unhealthy",
            }
            pd_sim = spawn_sim(*SIM_ARGS, "--port", str(port))
            deadline = time.monotonic() + 10
            while _served_by(client, LONG) != "pd":
                assert time.monotonic() < deadline, "the restarted pool never came back"
                time.sleep(0.1)
            assert _served_by(client, SHORT) == "colo"
    finally:
        pd_sim.stop()


def test_both_pools_down_is_503_with_retry_after(tmp_path: Path) -> None:
    with start_sim(*SIM_ARGS) as pd_sim, start_sim(*SIM_ARGS) as colo_sim:
        config = length_routed_config(pd_sim.url, colo_sim.url)
        with start_gateway(config, tmp_path) as gw:
            pd_sim.stop()
            colo_sim.stop()
            response = chat(gw.base_url, SHORT)
            assert response.status_code in (502, 503)
            deadline = time.monotonic() + 30  # until the health checks mark both down
            while (response := chat(gw.base_url, SHORT)).status_code != 503:
                assert time.monotonic() < deadline, "the pools were never marked down"
                time.sleep(0.05)
            assert response.headers["retry-after"] == "1"
            assert response.json()["error"]["code"] == "no_healthy_upstream"
            assert response.headers["x-gateway-route-reason"] == "prompt_short+unavailable"


def test_5xx_is_retried_on_the_other_pool_before_any_byte(
    pd_sim: SimProcess, colo_sim: SimProcess, tmp_path: Path
) -> None:
    config = length_routed_config(pd_sim.url, colo_sim.url)
    config["pools"]["colo"]["forward_headers"] = STEERING  # only colocated obeys x-sim-status
    with start_gateway(config, tmp_path) as gw:
        response = chat(gw.base_url, SHORT, headers={"x-sim-status": "500"})
        assert response.status_code == 200
        assert response.headers["x-gateway-pool"] == "pd"
        assert response.headers["x-gateway-route-reason"] == "prompt_short+failover_failed"
        assert [r["status"] for r in colo_sim.requests()] == [500]
        assert '{cause="status_5xx",model="sim-model",pool="colo"} 1.0' in _metrics(gw.url)


def test_no_retry_once_streaming_started(
    pd_sim: SimProcess, colo_sim: SimProcess, tmp_path: Path
) -> None:
    config = length_routed_config(pd_sim.url, colo_sim.url, forward_headers=STEERING)
    with start_gateway(config, tmp_path) as gw:
        client = openai.OpenAI(base_url=gw.base_url, api_key="unused", max_retries=0)
        stream = client.chat.completions.create(
            model=MODEL,
            messages=SHORT,
            max_tokens=20,
            stream=True,
            extra_headers={"x-sim-fail-after": "2"},
        )
        with pytest.raises(openai.APIError):
            for _ in stream:
                pass
        assert len(colo_sim.requests()) == 1
        assert pd_sim.requests() == []  # the broken stream was not replayed elsewhere


def test_saturated_pool_overflows_to_the_other(
    pd_sim: SimProcess, colo_sim: SimProcess, tmp_path: Path
) -> None:
    import threading

    config = length_routed_config(pd_sim.url, colo_sim.url, forward_headers=STEERING)
    config["pools"]["colo"]["capacity"] = 1
    config["pools"]["pd"]["capacity"] = 1
    with start_gateway(config, tmp_path) as gw:
        slow = threading.Thread(
            target=chat, args=(gw.base_url, SHORT), kwargs={"headers": {"x-sim-ttft-ms": "1500"}}
        )
        slow.start()
        colo_sim.wait_for_requests(1)
        overflow = chat(gw.base_url, SHORT, headers={"x-sim-ttft-ms": "1500"})
        assert overflow.headers["x-gateway-pool"] == "pd"
        assert overflow.headers["x-gateway-route-reason"] == "prompt_short+failover_saturated"
        slow.join()


def test_both_saturated_is_503(pd_sim: SimProcess, colo_sim: SimProcess, tmp_path: Path) -> None:
    import threading

    config = length_routed_config(pd_sim.url, colo_sim.url, forward_headers=STEERING)
    config["pools"]["colo"]["capacity"] = 1
    config["pools"]["pd"]["capacity"] = 1
    with start_gateway(config, tmp_path) as gw:
        busy = [
            threading.Thread(
                target=chat, args=(gw.base_url, m), kwargs={"headers": {"x-sim-ttft-ms": "1500"}}
            )
            for m in (SHORT, LONG)
        ]
        for thread in busy:
            thread.start()
        colo_sim.wait_for_requests(1)
        pd_sim.wait_for_requests(1)
        refused = chat(gw.base_url, SHORT)
        assert refused.status_code == 503 and refused.headers["retry-after"] == "1"
        assert "saturated" in refused.json()["error"]["message"]
        for thread in busy:
            thread.join()


def _served_by(client: openai.OpenAI, messages: list[dict[str, str]]) -> str:
    raw = client.chat.completions.with_raw_response.create(
        model=MODEL,
        messages=messages,  # type: ignore[arg-type]
        max_tokens=3,
    )
    raw.parse()
    return raw.headers["x-gateway-pool"]


def _streamed_by(client: openai.OpenAI, messages: list[dict[str, str]]) -> str:
    with client.chat.completions.with_streaming_response.create(
        model=MODEL,
        messages=messages,  # type: ignore[arg-type]
        max_tokens=3,
        stream=True,
    ) as response:
        pool = response.headers["x-gateway-pool"]
        text = "".join(
            chunk.choices[0].delta.content or "" for chunk in response.parse() if chunk.choices
        )
        assert text
        return pool


def _metrics(url: str) -> str:
    import httpx

    return httpx.get(url + "/metrics", timeout=5).text
