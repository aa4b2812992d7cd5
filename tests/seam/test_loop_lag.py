"""The event loop's lag probe in the app: a blocking call on the loop shows on /metrics, in the
log and, with a bound set, in /readyz; the collector's pauses are exported."""

from __future__ import annotations

import asyncio
import logging
import time
from pathlib import Path

import pytest

from tests.seam.harness import running_gateway
from tests.seam.upstream import Script

SERVER = {
    "access_log": False,
    "loop_lag_interval_seconds": 0.01,
    "loop_lag_warn_seconds": 0.05,
    "loop_lag_unready_seconds": 0.1,
    "loop_lag_unready_for_seconds": 0.3,
}


def histogram_count(text: str, name: str) -> float:
    (line,) = [x for x in text.splitlines() if x.startswith(name + "_count")]
    return float(line.rsplit(" ", 1)[1])


async def test_a_blocked_loop_is_seen_in_metrics_log_and_readiness(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    async with running_gateway(tmp_path, {"default": Script()}, server=SERVER) as gw:
        await asyncio.sleep(0.05)
        before = await gw.get("/readyz")
        with caplog.at_level(logging.WARNING, logger="gateway.server.loop_watch"):
            time.sleep(0.3)  # a blocking call in some request's path
            await asyncio.sleep(0.03)
        during = await gw.get("/readyz")
        await asyncio.sleep(0.4)  # past loop_lag_unready_for_seconds
        after = await gw.get("/readyz")
        metrics = (await gw.get("/metrics")).body.decode()
    assert (before.status, during.status, after.status) == (200, 503, 200)
    assert during.json()["event_loop"] == {"ready": False}
    assert before.json()["event_loop"] == {"ready": True}
    assert histogram_count(metrics, "gateway_event_loop_lag_seconds") >= 10
    assert 'gateway_event_loop_lag_seconds_bucket{le="+Inf"}' in metrics
    for generation in ("0", "1", "2"):
        assert f'gateway_gc_pause_seconds_count{{generation="{generation}"}}' in metrics
    (line,) = [r for r in caplog.records if r.name == "gateway.server.loop_watch"]
    assert line.levelname == "WARNING"
    assert line.fields["loop_lag_seconds"] >= 0.25  # type: ignore[attr-defined]


async def test_without_a_bound_a_blocked_loop_leaves_readiness_alone(tmp_path: Path) -> None:
    server = {**SERVER, "loop_lag_unready_seconds": None}
    async with running_gateway(tmp_path, {"default": Script()}, server=server) as gw:
        await asyncio.sleep(0.02)
        time.sleep(0.2)
        await asyncio.sleep(0.02)
        ready = await gw.get("/readyz")
    assert ready.status == 200 and ready.json()["event_loop"] == {"ready": True}
