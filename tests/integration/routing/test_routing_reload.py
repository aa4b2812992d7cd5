"""Config reload without restart: SIGHUP and the admin API; bad files refused; streams survive."""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import openai
import yaml

from tests.gatewayproc import GatewayProcess, start_gateway
from tests.integration.routing.conftest import MODEL, NO_DELAY, SHORT, STEERING, fast_pool
from tests.simproc import start_sim


def two_pool_config(a_url: str, b_url: str, weights: tuple[float, float]) -> dict[str, Any]:
    return {
        "auth": {"enabled": False},
        "pools": {"a": fast_pool(a_url, forward_headers=STEERING), "b": fast_pool(b_url)},
        "models": {
            MODEL: {
                "variants": {
                    "stable": {"weight": weights[0], "pools": {"colocated": "a"}},
                    "next": {"weight": weights[1], "pools": {"colocated": "b"}},
                }
            }
        },
    }


def rewrite(
    gw: GatewayProcess, tmp_path: Path, config: dict[str, Any] | str, **server: Any
) -> None:
    """Replace the running gateway's config file (keeping its server section, plus ``server``)."""
    path = gw.config_path
    assert path is not None
    if isinstance(config, str):
        path.write_text(config)
        return
    running = yaml.safe_load(path.read_text())["server"]
    path.write_text(yaml.safe_dump({**config, "server": {**running, **server}}))


def variant_of(gw: GatewayProcess, user: str = "u") -> str:
    body = {"model": MODEL, "messages": SHORT, "max_tokens": 2, "user": user}
    response = httpx.post(gw.base_url + "/chat/completions", json=body, timeout=10)
    assert response.status_code == 200, response.text
    return response.headers["x-gateway-variant"]


def eventually(check: Callable[[], bool], timeout: float = 10) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, "condition not reached"
        time.sleep(0.05)


def test_sighup_applies_new_weights_and_refuses_a_bad_file(tmp_path: Path) -> None:
    with (
        start_sim("--model", MODEL, *NO_DELAY) as a,
        start_sim("--model", MODEL, *NO_DELAY) as b,
        start_gateway(two_pool_config(a.url, b.url, (1, 0)), tmp_path) as gw,
    ):
        assert {variant_of(gw, f"u{i}") for i in range(20)} == {"stable"}
        rewrite(gw, tmp_path, two_pool_config(a.url, b.url, (0, 1)))
        gw.proc.send_signal(signal.SIGHUP)
        eventually(lambda: variant_of(gw) == "next")
        assert {variant_of(gw, f"u{i}") for i in range(20)} == {"next"}
        assert gw.proc.poll() is None  # SIGHUP did not stop the process

        rewrite(gw, tmp_path, "pools: {a: {urls: ['http://127.0.0.1:1'], colour: red}}\n")
        gw.proc.send_signal(signal.SIGHUP)
        eventually(lambda: "config reload refused" in gw.logs())
        assert "pools.a.colour" in gw.logs()
        assert {variant_of(gw, f"u{i}") for i in range(20)} == {"next"}  # the old one serves


def test_admin_reload_reports_refusal_then_applies(tmp_path: Path) -> None:
    with (
        start_sim("--model", MODEL, *NO_DELAY) as a,
        start_sim("--model", MODEL, *NO_DELAY) as b,
        start_gateway(two_pool_config(a.url, b.url, (1, 0)), tmp_path) as gw,
    ):
        bad = two_pool_config(a.url, b.url, (1, 0))
        bad["models"][MODEL]["variants"]["next"]["pools"]["colocated"] = "nope"
        rewrite(gw, tmp_path, bad)
        refused = httpx.post(gw.url + "/admin/routing/reload", timeout=10)
        assert refused.status_code == 400
        assert refused.json()["error"]["code"] == "invalid_config"
        assert (
            "models.sim-model.variants.next.pools.colocated" in refused.json()["error"]["message"]
        )
        assert variant_of(gw) == "stable"

        rewrite(gw, tmp_path, two_pool_config(a.url, b.url, (0, 1)), max_body_bytes=10)
        applied = httpx.post(gw.url + "/admin/routing/reload", timeout=10)
        assert applied.status_code == 200 and applied.json()["status"] == "reloaded"
        assert variant_of(gw) == "next"  # routing changed; a 10-byte body limit did not
        assert "these sections change only on restart" in gw.logs()
        metrics = httpx.get(gw.url + "/metrics", timeout=5).text
        assert 'gateway_config_reloads_total{result="refused"} 1.0' in metrics
        assert 'gateway_config_reloads_total{result="applied"} 1.0' in metrics


def test_stream_in_flight_survives_a_reload_that_replaces_its_pool(tmp_path: Path) -> None:
    with (
        start_sim("--model", MODEL, *NO_DELAY) as a,
        start_sim("--model", MODEL, *NO_DELAY) as b,
        start_gateway(two_pool_config(a.url, b.url, (1, 0)), tmp_path) as gw,
    ):
        result: dict[str, Any] = {}
        thread = threading.Thread(target=_slow_stream, args=(gw, result))
        thread.start()
        a.wait_for_requests(1)
        moved = two_pool_config(b.url, a.url, (1, 0))  # pool "a" now points elsewhere
        rewrite(gw, tmp_path, moved)
        assert httpx.post(gw.url + "/admin/routing/reload", timeout=10).status_code == 200
        assert variant_of(gw) == "stable"
        assert len(b.requests()) == 1  # new requests use the replaced pool's new replica
        thread.join(30)
        assert result.get("finish_reason") == "length", result
        assert result["chunks"] == 20


def _slow_stream(gw: GatewayProcess, result: dict[str, Any]) -> None:
    client = openai.OpenAI(base_url=gw.base_url, api_key="unused", max_retries=0)
    try:
        stream = client.chat.completions.create(
            model=MODEL,
            messages=SHORT,  # type: ignore[arg-type]
            max_tokens=20,
            stream=True,
            extra_headers={"x-sim-itl-ms": "75"},
            extra_body={"ignore_eos": True},  # vLLM's: the whole cap, 20 chunks
        )
        chunks = [c for c in stream if c.choices]
        result["chunks"] = sum(1 for c in chunks if c.choices[0].delta.content)
        result["finish_reason"] = chunks[-1].choices[0].finish_reason
    except Exception as err:  # reported through the assertion in the test
        result["error"] = repr(err)


def test_unchanged_pool_keeps_its_health_state(tmp_path: Path) -> None:
    with start_sim("--model", MODEL, *NO_DELAY) as a, start_sim("--model", MODEL, *NO_DELAY) as b:
        config = two_pool_config(a.url, b.url, (1, 0))
        with start_gateway(config, tmp_path) as gw:
            b.stop()
            eventually(lambda: not _replica(gw, "b")["healthy"])
            rewrite(gw, tmp_path, two_pool_config(a.url, b.url, (1, 1)))
            assert httpx.post(gw.url + "/admin/routing/reload", timeout=10).status_code == 200
            assert not _replica(gw, "b")["healthy"]  # same pool object, not a fresh optimist


def _replica(gw: GatewayProcess, pool: str) -> dict[str, Any]:
    state = httpx.get(gw.url + "/admin/routing", timeout=5).json()
    replica: dict[str, Any] = state["pools"][pool]["replicas"][0]
    return replica
