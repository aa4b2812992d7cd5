"""A real simulator process and a real gateway process in front of it, shared per module."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.gatewayproc import GatewayProcess, start_gateway
from tests.simproc import SimProcess, start_sim

STEERING = ["x-sim-ttft-ms", "x-sim-itl-ms", "x-sim-status", "x-sim-fail-after", "x-sim-hang"]
MODEL = "sim-model"


def gateway_config(*sim_urls: str, **pool: Any) -> dict[str, Any]:
    return {
        "pools": {"sim": {"urls": list(sim_urls), "forward_headers": STEERING, **pool}},
        "models": {MODEL: {"pool": "sim"}, "renamed": {"pool": "sim", "upstream_model": MODEL}},
    }


@pytest.fixture(scope="module")
def sim() -> Iterator[SimProcess]:
    # Zero delays by default, so per-request steering headers can still shape timing.
    timing = ["--ttft-base-ms", "0", "--ttft-per-token-ms", "0", "--itl-ms", "0"]
    with start_sim("--model", MODEL, "--max-model-len", "512", *timing) as process:
        yield process


@pytest.fixture(scope="module")
def gateway(sim: SimProcess, tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayProcess]:
    config = gateway_config(
        sim.url,
        timeouts={"connect": 2, "first_byte": 1.0, "idle": 0.5, "total": 5},
        health={"interval": 0.5, "timeout": 0.5},
    )
    config["server"] = {"max_body_bytes": 65536, "max_tokens_limit": 100000}
    with start_gateway(config, tmp_path_factory.mktemp("gw")) as process:
        yield process


@pytest.fixture
def tmp(tmp_path: Path) -> Path:
    return tmp_path
