"""Simulator processes shared by the tests of this folder (one per module, reset per test)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.simproc import SimProcess, spawn_sim
from tests.unit.sim.sim_args import MAX_MODEL_LEN, MODELS


@pytest.fixture(scope="module")
def fast_sim_process() -> Iterator[SimProcess]:
    sim = spawn_sim(
        "--no-delay",
        "--model",
        MODELS[0],
        "--model",
        MODELS[1],
        "--max-model-len",
        str(MAX_MODEL_LEN),
        "--output-tokens",
        "8",
    )
    yield sim
    sim.stop()


@pytest.fixture
def fast_sim(fast_sim_process: SimProcess) -> SimProcess:
    """A no-delay simulator with two models and a 256-token context, its records cleared."""
    fast_sim_process.reset()
    return fast_sim_process


@pytest.fixture(scope="module")
def timed_sim_process() -> Iterator[SimProcess]:
    # Prefill: 40 ms + 1 ms per prompt token. Decode: 30 ms, +25 ms per other concurrent decode.
    sim = spawn_sim(
        "--ttft-base-ms",
        "40",
        "--ttft-per-token-ms",
        "1",
        "--itl-ms",
        "30",
        "--itl-per-concurrent-ms",
        "25",
        "--output-tokens",
        "6",
    )
    yield sim
    sim.stop()


@pytest.fixture
def timed_sim(timed_sim_process: SimProcess) -> SimProcess:
    """A simulator with a real timing model, its records cleared."""
    timed_sim_process.reset()
    return timed_sim_process
