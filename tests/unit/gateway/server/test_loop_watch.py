"""The event loop's lag probe and the collector's pauses: samples, the warning, readiness."""

from __future__ import annotations

import asyncio
import gc
import logging
import time

import pytest

from gateway.config import ServerConfig
from gateway.metrics import Buckets, GatewayMetrics
from gateway.server.loop_watch import GcPauses, LoopLagProbe, LoopWatch

WATCH = "gateway.server.loop_watch"


class Now:
    def __init__(self) -> None:
        self.value = 1000.0

    def __call__(self) -> float:
        return self.value


def probe(now: Now, **kwargs: float) -> tuple[LoopLagProbe, Buckets]:
    lag = GatewayMetrics().event_loop_lag.labels()
    settings = {"interval": 0.1, "warn_above": 0.05, "log_every": 10.0, **kwargs}
    return LoopLagProbe(lag, now=now, **settings), lag  # type: ignore[arg-type]


def sample(metrics: GatewayMetrics, name: str, labels: dict[str, str] | None = None) -> float:
    value = metrics.registry.get_sample_value(name, labels or {})
    return 0.0 if value is None else value


def test_every_sample_is_counted_in_its_bucket() -> None:
    p, lag = probe(Now())
    for value in (0.0002, 0.003, 0.3):
        p.observe(value)
    assert sum(lag.counts) == 3
    assert lag.total == pytest.approx(0.3032)
    assert lag.counts[lag.bounds.index(0.5)] == 1  # 0.3 is counted under le=0.5


def test_a_late_sample_logs_at_most_once_per_interval_and_counts_the_rest(
    caplog: pytest.LogCaptureFixture,
) -> None:
    now = Now()
    p, _ = probe(now)
    with caplog.at_level(logging.WARNING, logger=WATCH):
        p.observe(0.01)  # under the bound: nothing
        p.observe(0.2)
        now.value += 1
        p.observe(0.4)
        p.observe(0.06)
        now.value += 10
        p.observe(0.07)
    first, second = (r for r in caplog.records if r.name == WATCH)
    assert first.fields == {  # type: ignore[attr-defined]
        "loop_lag_seconds": 0.2,
        "loop_lag_max_seconds": 0.2,
        "samples_over": 1,
    }
    assert second.fields["samples_over"] == 3  # type: ignore[attr-defined]
    assert second.fields["loop_lag_max_seconds"] == 0.4  # type: ignore[attr-defined]
    assert "0.070 s late" in second.getMessage()


def test_readiness_ignores_lag_without_a_bound() -> None:
    p, _ = probe(Now())
    p.observe(30.0)
    assert p.ready()


def test_a_sample_past_the_bound_keeps_the_replica_unready_for_a_while() -> None:
    now = Now()
    p, _ = probe(now, unready_above=0.5, unready_for=10.0)
    p.observe(0.4)
    assert p.ready()
    p.observe(0.6)
    assert not p.ready()
    now.value += 9.9
    assert not p.ready()
    now.value += 0.2
    assert p.ready()


async def test_a_loop_stuck_now_is_unready_before_its_sample_is_taken() -> None:
    now = Now()
    p, lag = probe(now, interval=3600.0, unready_above=0.5)
    task = asyncio.create_task(p.run())
    await asyncio.sleep(0)  # the probe is asleep, due in an hour
    assert p.ready() and p.lag_now() == 0.0
    now.value += 3600.6  # the hour passed, and the loop has not woken it: 0.6 s overdue
    assert p.lag_now() == pytest.approx(0.6)
    assert not p.ready()
    task.cancel()
    assert sum(lag.counts) == 0


async def test_a_blocking_call_on_the_loop_shows_as_lag_a_warning_and_unreadiness(
    caplog: pytest.LogCaptureFixture,
) -> None:
    metrics = GatewayMetrics()
    server = ServerConfig(
        loop_lag_interval_seconds=0.01,
        loop_lag_warn_seconds=0.05,
        loop_lag_unready_seconds=0.1,
    )
    watch = LoopWatch.build(server, metrics)
    watch.start()
    try:
        await asyncio.sleep(0.05)
        assert watch.ready()
        with caplog.at_level(logging.WARNING, logger=WATCH):
            time.sleep(0.25)  # what a blocking call does to every task of the loop
            await asyncio.sleep(0.05)
        assert not watch.ready()
    finally:
        await watch.stop()
    assert sample(metrics, "gateway_event_loop_lag_seconds_count") >= 5
    late = sample(metrics, "gateway_event_loop_lag_seconds_count") - sample(
        metrics, "gateway_event_loop_lag_seconds_bucket", {"le": "0.1"}
    )
    assert late >= 1  # the sample that slept through the block (others only on a busy machine)
    (line,) = [r for r in caplog.records if r.name == WATCH]
    assert line.fields["loop_lag_seconds"] >= 0.2  # type: ignore[attr-defined]


async def test_a_zero_interval_turns_the_probe_off() -> None:
    metrics = GatewayMetrics()
    server = ServerConfig(loop_lag_interval_seconds=0, loop_lag_unready_seconds=0.1)
    watch = LoopWatch.build(server, metrics)
    watch.start()
    time.sleep(0.15)
    await asyncio.sleep(0)
    assert watch.ready() and watch.probe is None
    await watch.stop()
    assert sample(metrics, "gateway_event_loop_lag_seconds_count") == 0


def test_collections_are_timed_by_generation_until_uninstalled() -> None:
    metrics = GatewayMetrics()
    pauses = GcPauses(metrics)
    gc.disable()  # only the collections made here
    pauses.install()
    pauses.install()  # once only
    try:
        gc.collect(0)
        gc.collect(2)
    finally:
        pauses.uninstall()
        gc.enable()
    gc.collect(0)
    count = "gateway_gc_pause_seconds_count"
    assert sample(metrics, count, {"generation": "0"}) == 1
    assert sample(metrics, count, {"generation": "2"}) == 1
    assert sample(metrics, count, {"generation": "1"}) == 0  # exported, at zero
    assert sample(metrics, "gateway_gc_pause_seconds_sum", {"generation": "2"}) > 0
    assert pauses.take_longest() > 0 and pauses.take_longest() == 0
