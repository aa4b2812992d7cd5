"""One log line per NIXL KV transfer on decode, and the sweep's reading of them back."""

from __future__ import annotations

import json
import logging
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from serve_app.kv_transfer_log import Transfer, log_each_transfer, parse_transfer_lines

ROOT = Path(__file__).parents[3]


class FakeStats:
    """The shape of vLLM's NixlKVConnectorStats.record_transfer, which records NIXL telemetry."""

    def __init__(self) -> None:
        self.durations: list[float] = []

    def record_transfer(self, res: Any) -> None:
        self.durations.append(res.xferDuration / 1e6)


def telemetry(size: int, xfer_us: float) -> SimpleNamespace:
    return SimpleNamespace(totalBytes=size, xferDuration=xfer_us, postDuration=50.0, descCount=64)


def test_each_transfer_is_recorded_and_logged(caplog: pytest.LogCaptureFixture) -> None:
    log_each_transfer(FakeStats)
    log_each_transfer(FakeStats)  # idempotent: one line per transfer, not two
    stats = FakeStats()
    with caplog.at_level(logging.INFO, logger="vllm.pd_serve.kv_transfer"):
        stats.record_transfer(telemetry(20 * 2**20, 1234.5))
    assert stats.durations == [pytest.approx(0.0012345)]  # vLLM's own recording still happens
    assert parse_transfer_lines(caplog.messages) == [Transfer(20 * 2**20, 1.234, 0.05, 64)]


def test_lines_are_read_back_from_the_logs_written_since_the_mark(tmp_path: Path) -> None:
    logs = tmp_path / "logs"
    logs.mkdir()
    decode = logs / "worker-abc.out"
    decode.write_text(
        "(pid=1) pd-serve kv_transfer bytes=10 xfer_ms=9.000 post_ms=1.000 descriptors=2\n"
    )
    tool = [sys.executable, str(ROOT / "loadtests" / "device" / "kv_transfers.py")]
    mark = tmp_path / "mark.json"
    subprocess.run([*tool, "mark", str(logs), str(mark)], check=True, cwd=ROOT)
    with decode.open("a") as log:
        for size, ms in ((2048, 1.5), (4096, 2.5)):
            log.write(
                f"INFO pd-serve kv_transfer bytes={size} xfer_ms={ms:.3f} post_ms=0.100 "
                "descriptors=8\n"
            )
    (logs / "worker-new.out").write_text("noise\n")
    out = tmp_path / "kv.json"
    subprocess.run([*tool, "since", str(logs), str(mark), str(out)], check=True, cwd=ROOT)
    summary = json.loads(out.read_text())
    assert summary["transfers"] == 2  # the line before the mark is not counted
    assert summary["xfer_ms"]["mean"] == pytest.approx(2.0)
    assert summary["mb_per_s"] == pytest.approx((2048 + 4096) / 4.0 / 1e3)
