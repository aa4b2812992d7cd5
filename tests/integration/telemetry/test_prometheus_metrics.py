"""``/metrics`` parses with the Prometheus text parser, and the per-phase histograms move.

The gateway here runs with tracing off (the default) while the standard OTEL_* variables point at a
receiver: nothing may be exported, and no traceparent is invented for the upstream.
"""

from __future__ import annotations

import signal
from collections.abc import Iterator

import httpx
import openai
import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.gatewayproc import GatewayProcess, start_gateway
from tests.integration.telemetry.conftest import MODEL, telemetry_config
from tests.otlpreceiver import Receiver, start_receiver
from tests.simproc import SimProcess

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


@pytest.fixture(scope="module")
def quiet_receiver() -> Iterator[Receiver]:
    with start_receiver() as running:
        yield running


@pytest.fixture
def untraced_gateway(
    sim: SimProcess, quiet_receiver: Receiver, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[GatewayProcess]:
    env = {"OTEL_EXPORTER_OTLP_ENDPOINT": quiet_receiver.http_url, "OTEL_BSP_SCHEDULE_DELAY": "50"}
    config = telemetry_config(sim.url)  # tracing: {} -> disabled
    with start_gateway(config, tmp_path_factory.mktemp("gw"), env=env) as process:
        yield process


def scrape(gateway: GatewayProcess) -> Samples:
    response = httpx.get(gateway.url + "/metrics", timeout=5)
    response.raise_for_status()
    return {
        (s.name, frozenset(s.labels.items())): s.value
        for family in text_string_to_metric_families(response.text)
        for s in family.samples
    }


def value(samples: Samples, name: str, **labels: str) -> float:
    return samples.get((name, frozenset(labels.items())), 0.0)


def chat(client: openai.OpenAI, stream: bool, request_id: str) -> None:
    messages = [{"role": "user", "content": "count the phases"}]
    if not stream:
        client.chat.completions.create(
            model=MODEL,
            messages=messages,
            max_tokens=4,
            extra_headers={"x-request-id": request_id},  # type: ignore[arg-type]
        )
        return
    for _ in client.chat.completions.create(
        model=MODEL,
        messages=messages,  # type: ignore[arg-type]
        max_tokens=6,
        stream=True,
        stream_options={"include_usage": True},
        extra_headers={"x-request-id": request_id},
    ):
        pass


def test_metrics_parse_and_the_phase_histograms_move(
    untraced_gateway: GatewayProcess, quiet_receiver: Receiver, sim: SimProcess
) -> None:
    before = scrape(untraced_gateway)
    with openai.OpenAI(base_url=untraced_gateway.base_url, api_key="x", max_retries=0) as client:
        for i in range(3):
            chat(client, stream=True, request_id=f"metered-{i}")
        chat(client, stream=False, request_id="metered-whole")
    after = scrape(untraced_gateway)

    def moved(name: str, **labels: str) -> float:
        return value(after, name, **labels) - value(before, name, **labels)

    phase = {"model": MODEL, "pool": "sim"}
    ttft = "gen_ai_server_time_to_first_token_seconds"
    assert moved(f"{ttft}_count", **phase, prompt_length="0-256") == 3
    assert moved(f"{ttft}_sum", **phase, prompt_length="0-256") >= 3 * 0.150  # the sim's TTFT
    assert moved("gen_ai_server_time_per_output_token_seconds_count", **phase) == 3
    tokens = {"tenant": "", "model": MODEL}
    assert moved("gateway_tokens_total", **tokens, direction="output") == 3 * 6 + 4
    assert moved("gateway_tokens_total", **tokens, direction="input") > 0
    requests = {"model": MODEL, "pool": "sim", "variant": "default", "status": "200"}
    assert moved("gateway_requests_total", **requests) == 4
    assert moved("gateway_request_duration_seconds_count", model=MODEL, pool="sim") == 4
    assert moved("gateway_tenant_requests_total", tenant="", status_class="2xx") == 4
    assert value(after, "gateway_requests_in_flight") == 1  # the scrape itself
    assert value(after, "gateway_pool_healthy", pool="sim") == 1
    assert value(after, "gateway_replica_healthy", pool="sim", replica=sim.url) == 1

    # Tracing off: no traceparent made up for the upstream, and nothing exported.
    records = [r for r in sim.requests() if str(r["client_request_id"]).startswith("metered-")]
    assert len(records) == 4
    assert not any("traceparent" in r["headers"] for r in records)
    # Stopping flushes whatever the exporter had queued (the tracer's shutdown), so only once the
    # gateway has exited does an empty receiver mean that nothing was exported.
    assert untraced_gateway.stop() == -signal.SIGTERM  # uvicorn re-raises it once shut down
    assert "Application shutdown complete" in untraced_gateway.logs()
    assert quiet_receiver.spans() == []
