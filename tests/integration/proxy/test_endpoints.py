"""The gateway's own endpoints, request ids, and graceful shutdown."""

from __future__ import annotations

import signal
import threading
import time
from pathlib import Path

import httpx
from prometheus_client.parser import text_string_to_metric_families

from tests.gatewayproc import GatewayProcess, start_gateway
from tests.integration.proxy.conftest import MODEL, gateway_config
from tests.simproc import SimProcess, start_sim

CHAT = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}


def test_healthz_and_readyz(gateway: GatewayProcess) -> None:
    assert httpx.get(gateway.url + "/healthz").json() == {"status": "ok"}
    ready = httpx.get(gateway.url + "/readyz")
    assert ready.status_code == 200 and ready.json()["status"] == "ready"


def test_readyz_follows_upstream_health(tmp_path: Path) -> None:
    with start_sim("--model", MODEL, "--no-delay") as sim:
        config = gateway_config(sim.url, health={"interval": 0.2, "timeout": 0.5})
        with start_gateway(config, tmp_path) as gateway:
            assert httpx.get(gateway.url + "/readyz").status_code == 200
            sim.stop()
            _eventually(lambda: httpx.get(gateway.url + "/readyz").status_code == 503)
            body = httpx.get(gateway.url + "/readyz").json()
            assert body["unready_models"] == ["renamed", MODEL]


def test_the_client_request_id_is_echoed_and_sent_upstream_beside_the_gateways(
    gateway: GatewayProcess, sim: SimProcess
) -> None:
    sim.reset()
    response = httpx.post(
        gateway.base_url + "/chat/completions", json=CHAT, headers={"x-request-id": "abc-123"}
    )
    assert response.headers["x-request-id"] == "abc-123"
    upstream = sim.requests()[-1]
    assert upstream["client_request_id"] == "abc-123"  # a correlation id, alongside
    assert upstream["request_id"] == response.headers["x-gateway-request-id"] != "abc-123"
    # Oversized or odd ids are replaced, never echoed.
    odd = httpx.post(
        gateway.base_url + "/chat/completions", json=CHAT, headers={"x-request-id": "x" * 500}
    )
    assert odd.headers["x-request-id"] != "x" * 500 and len(odd.headers["x-request-id"]) == 24
    made = httpx.post(gateway.base_url + "/chat/completions", json=CHAT)
    assert made.headers["x-request-id"] == sim.requests()[-1]["request_id"]


def test_access_log_is_json_lines_with_request_id(gateway: GatewayProcess) -> None:
    httpx.post(
        gateway.base_url + "/chat/completions", json=CHAT, headers={"x-request-id": "log-me"}
    )
    entries = [e for e in gateway.access_log("log-me") if e["correlation_id"] == "log-me"]
    assert len(entries) == 1
    entry = entries[0]
    assert entry["status"] == 200 and entry["model"] == MODEL and entry["pool"] == "sim"
    assert entry["latency_ms"] > 0


def test_metrics_parse_and_count(gateway: GatewayProcess) -> None:
    def requests_counted() -> float:
        text = httpx.get(gateway.url + "/metrics").text
        for family in text_string_to_metric_families(text):
            if family.name == "gateway_requests":
                return sum(
                    s.value
                    for s in family.samples
                    if s.name == "gateway_requests_total" and s.labels["model"] == MODEL
                )
        return 0.0

    before = requests_counted()
    httpx.post(gateway.base_url + "/chat/completions", json=CHAT)
    assert requests_counted() == before + 1


def test_openapi_document(gateway: GatewayProcess) -> None:
    doc = httpx.get(gateway.url + "/openapi.json").json()
    assert doc["openapi"].startswith("3.")
    assert {"/v1/chat/completions", "/v1/completions", "/v1/models"} <= set(doc["paths"])
    responses = doc["paths"]["/v1/responses"]["post"]
    assert "text/event-stream" in responses["responses"]["200"]["content"]
    assert doc["components"]["schemas"]["ResponsesRequest"]["required"] == ["model", "input"]


def test_sigterm_lets_in_flight_streams_finish(tmp_path: Path) -> None:
    with (
        start_sim("--model", MODEL, "--itl-ms", "100", "--ttft-base-ms", "0") as sim,
        start_gateway(gateway_config(sim.url), tmp_path) as gateway,
    ):
        lines: list[str] = []
        streaming = threading.Event()

        def stream() -> None:
            with httpx.stream(
                "POST",
                gateway.base_url + "/chat/completions",
                json={**CHAT, "max_tokens": 10, "stream": True},
                timeout=10,
            ) as response:
                for line in response.iter_lines():
                    if line:
                        lines.append(line)
                        streaming.set()

        reader = threading.Thread(target=stream)
        reader.start()
        assert streaming.wait(30), "the stream never started"  # in flight: its first event came
        gateway.proc.send_signal(signal.SIGTERM)
        refused = False
        deadline = time.monotonic() + 10  # until the listener is closed: polled, not slept
        while not refused and time.monotonic() < deadline:
            try:
                httpx.get(gateway.url + "/healthz", timeout=1)
                time.sleep(0.02)
            except httpx.HTTPError:
                refused = True
        reader.join(10)
        assert refused, "a stopping gateway must not accept new connections"
        assert lines[-1] == "data: [DONE]"
        # uvicorn re-raises the signal once it has shut down cleanly.
        assert gateway.proc.wait(10) in (0, -signal.SIGTERM)
        assert "Finished server process" in gateway.logs()


def _eventually(check, timeout: float = 5.0) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(0.05)
    raise AssertionError("condition not met in time")


def test_public_readyz_names_no_replica(tmp_path: Path) -> None:
    with start_sim("--model", MODEL, "--no-delay") as sim:
        secret_url = sim.url.replace("http://", "http://ops:hunter2secret@")
        with start_gateway(gateway_config(secret_url), tmp_path) as gateway:
            body = httpx.get(gateway.url + "/readyz").text
            assert "hunter2secret" not in body and "127.0.0.1" not in body
            metrics = httpx.get(gateway.url + "/metrics").text.splitlines()
            # The breaker gauge is set in gateway/routing/table.py (the pipeline's): not yet.
            replica_lines = [m for m in metrics if "replica=" in m and "breaker" not in m]
            assert replica_lines and not any("hunter2secret" in m for m in replica_lines)
            assert any('replica="http://***@127.0.0.1' in m for m in replica_lines)
