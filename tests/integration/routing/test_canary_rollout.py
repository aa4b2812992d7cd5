"""Canary splits through a real gateway: weights, stickiness, forcing, automatic rollback."""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.gatewayproc import GatewayProcess, start_gateway
from tests.integration.routing.conftest import MODEL, NO_DELAY, SHORT, STEERING, fast_pool
from tests.simproc import SimProcess, start_sim

CANARY_MODEL = "sim-model-v2"  # the canary upstream serves the model under a new name


@pytest.fixture
def stable_sim() -> Iterator[SimProcess]:
    with start_sim("--model", MODEL, *NO_DELAY) as sim:
        yield sim


def canary_config(
    stable_url: str, canary_url: str, weights: tuple[float, float], **canary: Any
) -> dict[str, Any]:
    force_headers = canary.pop("force_headers", "trusted")
    return {
        "auth": {"enabled": False},
        "pools": {
            "stable": fast_pool(stable_url),
            "canary": fast_pool(canary_url, forward_headers=STEERING),
        },
        "models": {
            MODEL: {
                "variants": {
                    "stable": {"weight": weights[0], "pools": {"colocated": "stable"}},
                    "canary": {
                        "weight": weights[1],
                        "pools": {"colocated": "canary"},
                        "upstream_model": CANARY_MODEL,
                    },
                },
                "canary": {"baseline": "stable", **canary},
                "routing": {"force_headers": force_headers},
            }
        },
    }


def ask(client: httpx.Client, user: str, **headers: str) -> httpx.Response:
    body = {"model": MODEL, "messages": SHORT, "max_tokens": 2, "user": user}
    return client.post("/chat/completions", json=body, headers=headers)


def test_split_follows_weights_and_sticks_per_user(stable_sim: SimProcess, tmp_path: Path) -> None:
    with (
        start_sim("--model", CANARY_MODEL, *NO_DELAY) as canary_sim,
        start_gateway(canary_config(stable_sim.url, canary_sim.url, (90, 10)), tmp_path) as gw,
        httpx.Client(base_url=gw.base_url, timeout=30) as client,
    ):
        first = {}
        for i in range(3000):
            response = ask(client, f"user-{i}")
            assert response.status_code == 200
            first[i] = response.headers["x-gateway-variant"]
        counts = Counter(first.values())
        # binomial(3000, 0.1): sd 16.4; allow 5 sd
        assert abs(counts["canary"] - 300) < 82, counts
        again = {i: ask(client, f"user-{i}").headers["x-gateway-variant"] for i in range(300)}
        assert all(again[i] == first[i] for i in again)  # sticky
        canary_records = canary_sim.requests()
        assert len(canary_records) == counts["canary"] + Counter(again.values())["canary"]
        assert {r["body"]["model"] for r in canary_records} == {CANARY_MODEL}
        metrics = httpx.get(gw.url + "/metrics", timeout=5).text
        served = f"{float(len(canary_records))}"
        assert (
            f'variant_requests_total{{model="{MODEL}",outcome="ok",variant="canary"}} {served}'
            in (metrics)
        )
        assert (
            'gateway_variant_time_to_first_token_seconds_count{model="sim-model",variant="canary"}'
            in (metrics)
        )


def test_force_header_only_when_allowed(stable_sim: SimProcess, tmp_path: Path) -> None:
    with start_sim("--model", CANARY_MODEL, *NO_DELAY) as canary_sim:
        trusted_only = canary_config(stable_sim.url, canary_sim.url, (100, 0))
        with (
            start_gateway(trusted_only, tmp_path) as gw,
            httpx.Client(base_url=gw.base_url, timeout=30) as client,
        ):
            # no authentication, so nobody is trusted: the header is ignored
            response = ask(client, "u", **{"x-gateway-variant": "canary"})
            assert response.headers["x-gateway-variant"] == "stable"
        anyone = canary_config(stable_sim.url, canary_sim.url, (100, 0), force_headers="always")
        with (
            start_gateway(anyone, tmp_path) as gw,
            httpx.Client(base_url=gw.base_url, timeout=30) as client,
        ):
            assert (
                ask(client, "u", **{"x-gateway-variant": "canary"}).headers["x-gateway-variant"]
                == "canary"
            )
            unknown = ask(client, "u", **{"x-gateway-variant": "beta"})
            assert unknown.status_code == 400 and "no variant 'beta'" in unknown.text


def test_failing_canary_is_rolled_back(stable_sim: SimProcess, tmp_path: Path) -> None:
    with start_sim("--model", CANARY_MODEL, *NO_DELAY) as canary_sim:
        config = canary_config(
            stable_sim.url, canary_sim.url, (50, 50), min_requests=10, window_seconds=30
        )
        with (
            start_gateway(config, tmp_path) as gw,
            httpx.Client(base_url=gw.base_url, timeout=30) as client,
        ):
            replies = []
            for i in range(300):
                # only the canary pool forwards the steering header: the canary "fails"
                response = ask(client, f"user-{i}", **{"x-sim-status": "500"})
                replies.append((response.headers["x-gateway-route-reason"], response.status_code))
                if _rolled_back(gw):
                    break
            assert _rolled_back(gw), "the failing canary was never rolled back"
            # every request the canary failed was served by stable: no client saw an error
            assert {status for _, status in replies} == {200}
            failovers = [r for r, _ in replies if r == "canary_failover"]
            assert 10 <= len(failovers) <= 60
            late = [ask(client, f"user-{i}") for i in range(len(replies))]
            assert {r.headers["x-gateway-variant"] for r in late} == {"stable"}
            reasons = {r.headers["x-gateway-route-reason"] for r in late}
            assert reasons == {"single_pool", "canary_rolled_back"}  # the canary's keys say so
            _assert_rollback_recorded(gw)


def test_slow_canary_is_rolled_back(stable_sim: SimProcess, tmp_path: Path) -> None:
    slow = ["--ttft-base-ms", "150", "--ttft-per-token-ms", "0", "--itl-ms", "0"]
    with start_sim("--model", CANARY_MODEL, *slow) as canary_sim:
        config = canary_config(
            stable_sim.url,
            canary_sim.url,
            (50, 50),
            min_requests=10,
            window_seconds=30,
            ttft_p95_margin=0.5,
        )
        with (
            start_gateway(config, tmp_path) as gw,
            httpx.Client(base_url=gw.base_url, timeout=30) as client,
        ):
            started = time.monotonic()
            for i in range(200):
                assert ask(client, f"user-{i}").status_code == 200
                if _rolled_back(gw):
                    break
            assert _rolled_back(gw), "the slow canary was never rolled back"
            assert time.monotonic() - started < 30  # within the configured window
            _assert_rollback_recorded(gw)
            # an operator raising the weight again brings it back
            raised = httpx.put(
                gw.url + "/admin/routing/models/sim-model/variants/canary",
                json={"weight": 100},
                timeout=5,
            )
            assert raised.status_code == 200
            canary = raised.json()["variants"]["canary"]
            assert canary["rolled_back"] is False and canary["reenabled"]["by"] == "admin"
            assert "canary re-enabled" in gw.logs()
            metrics = httpx.get(gw.url + "/metrics", timeout=5).text
            assert 'gateway_canary_reenables_total{model="sim-model",variant="canary"} 1.0' in (
                metrics
            )


def _rolled_back(gw: GatewayProcess) -> bool:
    state = httpx.get(gw.url + "/admin/routing", timeout=5).json()
    canary: dict[str, Any] = state["models"][MODEL]["variants"]["canary"]
    return bool(canary["rolled_back"]) and canary["weight"] == 0


def _assert_rollback_recorded(gw: GatewayProcess) -> None:
    metrics = httpx.get(gw.url + "/metrics", timeout=5).text
    assert 'gateway_canary_rollbacks_total{model="sim-model",variant="canary"} 1.0' in metrics
    assert 'gateway_variant_rolled_back{model="sim-model",variant="canary"} 1.0' in metrics
    assert 'gateway_variant_weight{model="sim-model",variant="canary"} 0.0' in metrics
    assert "canary rolled back" in gw.logs()
