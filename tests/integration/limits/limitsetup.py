"""Shared pieces of the rate-limit and accounting integration tests: configs, the ledger reader."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from tests.simproc import SimProcess, start_sim

MODEL = "sim-model"
STEERING = ["x-sim-ttft-ms", "x-sim-itl-ms", "x-sim-status", "x-sim-fail-after", "x-sim-hang"]


def limited_config(
    sim_url: str, tmp_path: Path, *, limits: dict[str, Any], **extra: Any
) -> dict[str, Any]:
    """A gateway in front of one simulator with ``limits`` (auth off: the anonymous key)."""
    return {
        "pools": {"sim": {"urls": [sim_url], "forward_headers": STEERING}},
        "models": {MODEL: {"pool": "sim"}},
        "limits": limits,
        "storage": {"url": f"sqlite:///{tmp_path}/gateway.db"},
        "server": {"access_log": False, "max_tokens_limit": 100_000},
        **extra,
    }


@contextmanager
def no_delay_sim(*args: str) -> Iterator[SimProcess]:
    with start_sim("--model", MODEL, "--no-delay", "--max-model-len", "100000", *args) as sim:
        yield sim


def ledger_rows(db_path: Path) -> list[dict[str, Any]]:
    """Every usage row, read with the standard library (not the gateway's own code)."""
    with sqlite3.connect(db_path) as conn:
        conn.row_factory = sqlite3.Row
        return [dict(r) for r in conn.execute("SELECT * FROM usage_ledger ORDER BY id")]
