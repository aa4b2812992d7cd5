"""A real OTLP receiver, a real simulator and real gateway processes exporting to the receiver."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.gatewayproc import GatewayProcess, start_gateway
from tests.otlpreceiver import ReceivedSpan, Receiver, start_receiver
from tests.simproc import SimProcess, start_sim

MODEL = "sim-model"
TTFT_MS = 150  # the simulator's prefill time, which the gateway's prefill span must show
ITL_MS = 5
# Export within ~50 ms instead of the 5 s default, so tests wait on spans briefly.
EXPORT_ENV = {"OTEL_BSP_SCHEDULE_DELAY": "50"}

SERVER, CLIENT = 2, 3  # OTLP's SpanKind values


def telemetry_config(sim_url: str, **tracing: Any) -> dict[str, Any]:
    return {
        "pools": {"sim": {"urls": [sim_url], "health": {"interval": 0.5, "timeout": 5.0}}},
        "models": {MODEL: {"pool": "sim"}},
        "tracing": tracing,
    }


@pytest.fixture(scope="module")
def receiver() -> Iterator[Receiver]:
    with start_receiver() as running:
        yield running


@pytest.fixture(scope="module")
def sim() -> Iterator[SimProcess]:
    timing = ["--ttft-base-ms", str(TTFT_MS), "--ttft-per-token-ms", "0", "--itl-ms", str(ITL_MS)]
    with start_sim("--model", MODEL, *timing, "--itl-per-concurrent-ms", "0") as process:
        yield process


@pytest.fixture(scope="module")
def traced_gateway(
    sim: SimProcess, receiver: Receiver, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[GatewayProcess]:
    config = telemetry_config(sim.url, enabled=True, endpoint=receiver.http_url, sampling_ratio=1.0)
    with start_gateway(config, tmp_path_factory.mktemp("gw"), env=EXPORT_ENV) as process:
        yield process


def trace_of(spans: list[ReceivedSpan], trace_id: str) -> list[ReceivedSpan]:
    return [s for s in spans if s.trace_id == trace_id]


def one(spans: list[ReceivedSpan], name: str) -> ReceivedSpan:
    found = [s for s in spans if s.name == name]
    assert len(found) == 1, [s.name for s in spans]
    return found[0]


@pytest.fixture
def tmp(tmp_path: Path) -> Path:
    return tmp_path
