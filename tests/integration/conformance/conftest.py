"""A real simulator process and a real gateway process in front of it, as ``run-local.sh --sim``
sets them up (the model ``tiny``), for suites the project did not write."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.gatewayproc import GatewayProcess, start_gateway
from tests.simproc import SimProcess, start_sim

MODEL = "tiny"


@pytest.fixture(scope="module")
def sim() -> Iterator[SimProcess]:
    timing = ["--ttft-base-ms", "0", "--ttft-per-token-ms", "0", "--itl-ms", "0"]
    with start_sim("--model", MODEL, *timing) as process:
        yield process


@pytest.fixture(scope="module")
def gateway(sim: SimProcess, tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayProcess]:
    config = {"pools": {"sim": {"urls": [sim.url]}}, "models": {MODEL: {"pool": "sim"}}}
    folder: Path = tmp_path_factory.mktemp("gw")
    with start_gateway(config, folder) as process:
        yield process
