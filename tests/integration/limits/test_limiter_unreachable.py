"""Redis unreachable: the gateway follows the configured policy (fail open or closed), logs it,
shows it in /readyz and /metrics, and recovers by itself when Redis comes back."""

from __future__ import annotations

import time
from pathlib import Path

import httpx

from tests.gatewayproc import GatewayProcess, start_gateway
from tests.integration.limits.limitsetup import MODEL, limited_config, no_delay_sim
from tests.redisserver import socket_url, spawn_redis

BODY = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 3}


def limits(redis_url: str, policy: str) -> dict[str, object]:
    return {
        "backend": "redis",
        "redis_url": redis_url,
        "redis_timeout": 0.2,
        "on_backend_error": policy,
        "defaults": {"requests_per_minute": 1000},
    }


def chat(gateway: GatewayProcess) -> httpx.Response:
    return httpx.post(gateway.base_url + "/chat/completions", json=BODY, timeout=10)


def backend_up(gateway: GatewayProcess) -> str:
    metrics = httpx.get(gateway.url + "/metrics", timeout=5).text
    line = next(x for x in metrics.splitlines() if x.startswith("gateway_rate_limiter_backend_up"))
    return line.split()[-1]


def test_fail_open_admits_reports_and_recovers(tmp_path: Path) -> None:
    folder = tmp_path / "redis"  # nothing listens there yet
    folder.mkdir()
    with (
        no_delay_sim() as sim,
        start_gateway(
            limited_config(sim.url, tmp_path, limits=limits(socket_url(folder), "open")), tmp_path
        ) as gateway,
    ):
        answer = chat(gateway)
        assert answer.status_code == 200
        assert "x-ratelimit-limit-requests" not in answer.headers  # nothing was counted
        ready = httpx.get(gateway.url + "/readyz", timeout=5)
        assert ready.status_code == 200
        assert ready.json()["rate_limiter"]["reachable"] is False
        assert backend_up(gateway) == "0.0"
        assert "rate limiter store unreachable, failing open" in gateway.logs()
        redis = spawn_redis(folder=folder)
        try:
            deadline = time.monotonic() + 10
            while "x-ratelimit-limit-requests" not in chat(gateway).headers:
                assert time.monotonic() < deadline, "the gateway never used Redis again"
                time.sleep(0.2)
            assert httpx.get(gateway.url + "/readyz", timeout=5).json()["rate_limiter"]["reachable"]
            assert backend_up(gateway) == "1.0"
        finally:
            redis.stop()


def test_fail_closed_refuses_with_503_and_is_not_ready(tmp_path: Path) -> None:
    with (
        no_delay_sim() as sim,
        start_gateway(
            limited_config(sim.url, tmp_path, limits=limits(socket_url(tmp_path), "closed")),
            tmp_path,
        ) as gateway,
    ):
        answer = chat(gateway)
        assert answer.status_code == 503
        assert answer.json()["error"]["code"] == "rate_limiter_unavailable"
        assert httpx.get(gateway.url + "/readyz", timeout=5).status_code == 503
        assert sim.requests() == []
