"""Two real simulator pools (one standing in for PD, one for colocated) and helpers to put a real
gateway in front of them with a routing config of the test's own."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.simproc import SimProcess, start_sim

MODEL = "sim-model"
STEERING = ["x-sim-ttft-ms", "x-sim-itl-ms", "x-sim-status", "x-sim-fail-after", "x-sim-hang"]
NO_DELAY = ["--ttft-base-ms", "0", "--ttft-per-token-ms", "0", "--itl-ms", "0"]
SIM_ARGS = ["--model", MODEL, "--max-model-len", "200000", *NO_DELAY]
THRESHOLD = 200
SHORT = [{"role": "user", "content": "hello there"}]
LONG = [{"role": "user", "content": "lorem " * 400}]  # about 400 cl100k tokens


def fast_pool(url: str, **extra: Any) -> dict[str, Any]:
    """A pool that notices a dead replica quickly, so tests do not wait on defaults."""
    return {
        "urls": [url],
        "timeouts": {"connect": 1, "first_byte": 5, "idle": 5, "total": 30},
        "health": {"interval": 0.2, "timeout": 0.5},
        "breaker": {"failures": 2, "open_seconds": 0.5},
        **extra,
    }


def length_routed_config(pd_url: str, colo_url: str, **pool_extra: Any) -> dict[str, Any]:
    return {
        "auth": {"enabled": False},
        "pools": {"pd": fast_pool(pd_url, **pool_extra), "colo": fast_pool(colo_url, **pool_extra)},
        "models": {
            MODEL: {
                "variants": {"stable": {"weight": 1, "pools": {"pd": "pd", "colocated": "colo"}}},
                "routing": {"pd_threshold_tokens": THRESHOLD, "force_headers": "always"},
            }
        },
    }


def chat(base_url: str, messages: list[dict[str, Any]], **extra: Any) -> httpx.Response:
    body = {"model": MODEL, "messages": messages, "max_tokens": 5, **extra.pop("body", {})}
    return httpx.post(base_url + "/chat/completions", json=body, timeout=30, **extra)


@pytest.fixture
def pd_sim() -> Iterator[SimProcess]:
    with start_sim(*SIM_ARGS) as sim:
        yield sim


@pytest.fixture
def colo_sim() -> Iterator[SimProcess]:
    with start_sim(*SIM_ARGS) as sim:
        yield sim
