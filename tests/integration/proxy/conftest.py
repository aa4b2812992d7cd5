"""A real simulator process and a real gateway process in front of it, shared per module."""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import openai
import pytest

from tests.conformance.httpx_check import checked_openai
from tests.gatewayproc import GatewayProcess, start_gateway
from tests.simproc import SimProcess, start_sim

STEERING = ["x-sim-ttft-ms", "x-sim-itl-ms", "x-sim-status", "x-sim-fail-after", "x-sim-hang"]
MODEL = "sim-model"
WEATHER = {  # a Responses function tool, as the SDK's users declare one
    "type": "function",
    "name": "get_weather",
    "description": "The weather in a city.",
    "parameters": {
        "type": "object",
        "properties": {"city": {"type": "string"}},
        "required": ["city"],
    },
}


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
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The module's gateway's folder: its config, its log and its store (``gateway.db``)."""
    return tmp_path_factory.mktemp("gw")


@pytest.fixture(scope="module")
def gateway(sim: SimProcess, folder: Path) -> Iterator[GatewayProcess]:
    config = gateway_config(
        sim.url,
        timeouts={"connect": 2, "first_byte": 1.0, "idle": 0.5, "total": 5},
        health={"interval": 0.5, "timeout": 0.5},
    )
    config["server"] = {"max_body_bytes": 65536, "max_tokens_limit": 100000}
    config["accounting"] = {"ledger_interval": 0.05}  # a request's row is soon there to read
    with start_gateway(config, folder) as process:
        yield process


@pytest.fixture
def client(gateway: GatewayProcess) -> Iterator[openai.OpenAI]:
    """The openai SDK on the module's gateway, retries off: every error reaches the test, and
    every whole answer is checked against OpenAI's document (tests/conformance)."""
    with checked_openai(gateway.base_url) as c:
        yield c


def ledger_row(folder: Path, request_id: str) -> dict[str, Any]:
    """The ledger row of one request (the gateway's id, from its response header), read with
    sqlite3 from the store in ``folder``; polled, as the gateway writes its rows every 50 ms."""
    deadline = time.monotonic() + 30
    with sqlite3.connect(folder / "gateway.db") as db:
        db.row_factory = sqlite3.Row
        while (
            row := db.execute(
                "SELECT * FROM usage_ledger WHERE request_id = ?", (request_id,)
            ).fetchone()
        ) is None:
            assert time.monotonic() < deadline, f"no ledger row for {request_id}"
            time.sleep(0.05)
    return dict(row)


@pytest.fixture
def tmp(tmp_path: Path) -> Path:
    return tmp_path
