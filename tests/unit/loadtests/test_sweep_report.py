"""The device sweep's tables and plot, from pd-loadtest reports as pd-sweep.sh leaves them."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).parents[3]


def sweep_report() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "sweep_report", ROOT / "loadtests" / "device" / "sweep_report.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def summary(ttft: float, ok: int = 4) -> dict[str, object]:
    dist = {"p50": ttft, "p90": ttft, "p99": ttft}
    return {
        "requests": ok, "ok": ok, "ttft": dist, "itl": dist, "tpot": dist, "e2e": dist,
        "throughput_rps": 1.0, "goodput_rps": 1.0, "output_tokens_per_s": 64.0,
    }  # fmt: skip


def test_tables_name_the_gateways_added_latency_and_the_lone_transfers(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    item = tmp_path / "c128"
    item.mkdir()
    targets = [
        {"name": name, "knee": None, "steps": [
            {"offered": 1, "summary": summary(ttft)}, {"offered": 8, "summary": summary(2 * ttft)}]}
        for name, ttft in (("pd", 0.145), ("pd-direct", 0.142), ("colocated", 0.064),
                           ("colocated-direct", 0.063))
    ]  # fmt: skip
    (item / "report.json").write_text(json.dumps({"meta": {"mode": "closed"}, "targets": targets}))
    # 2 warm-up + 4 at concurrency 1 transfer alone (40 ms each), then queued ones (1000 ms).
    each = [[18 * 2**20, 40.0, 0.5, 64]] * 6 + [[18 * 2**20, 1000.0, 0.5, 64]] * 6
    (item / "kv_transfers.json").write_text(json.dumps({"each": each}))
    sweep_report().main(tmp_path, tmp_path / "plots")
    out = capsys.readouterr().out
    assert "| pd | 1 | 145.0 / 142.0 | +3.0 |" in out
    assert "| colocated | 8 | 128.0 / 126.0 | +2.0 |" in out
    assert "| 128-token prompts, alone | 6 | 18 | 40 / 40 / 40 | 472 |" in out
    assert (tmp_path / "plots" / "pd_vs_colocated.png").stat().st_size > 1000
