"""How late the event loop runs what is due, and how long the garbage collector stops it.

Every request of a worker shares one event-loop thread, so anything that holds that thread (a
blocking call, a long stretch of Python, a collection of the cyclic garbage collector, another
thread holding the GIL) delays every request's next step at once: a first byte waits for
nothing of its own (issue 41). Neither CPU figures nor per-request timings show it; a probe does.

:class:`LoopLagProbe` is one task that asks to sleep ``interval`` seconds and measures how much
later than asked it woke: that lateness is what any ready callback waited at that moment. About
ten timer wake-ups a second, a few microseconds each. Each sample goes to
``gateway_event_loop_lag_seconds``; one above ``warn_above`` logs a warning (at most one line per
``log_every`` seconds, which counts the samples over the bound since the last); with
``unready_above`` set, the replica reports not ready while a sample above it is younger than
``unready_for`` seconds, or while the pending sample is already that overdue (the loop is stuck
now, and the readiness probe was answered anyway).

:class:`GcPauses` times each collection through ``gc.callbacks`` into
``gateway_gc_pause_seconds{generation}``; the longest pause since the last lag warning is in that
warning, so an operator sees at once whether the collector was the cause::

    watch = LoopWatch.build(config.server, metrics)
    watch.start()          # in the running loop (the app's lifespan)
    watch.ready()          # False while the loop has been stuck past the bound
    await watch.stop()
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import math
import time
from typing import Any

from gateway.clock import Reading
from gateway.config import ServerConfig
from gateway.metrics import Buckets, GatewayMetrics

logger = logging.getLogger(__name__)

GENERATIONS = ("0", "1", "2")


class GcPauses:
    """Times every collection of the cyclic garbage collector, whichever thread runs it.

    A callback on ``gc.callbacks`` (process-wide, so installed and removed by the app's lifespan:
    tests build many apps in one process). The collector does not run two collections at once,
    so one start time suffices."""

    def __init__(self, metrics: GatewayMetrics, now: Reading = time.perf_counter) -> None:
        self._children = {g: metrics.gc_pause.labels(g) for g in GENERATIONS}
        self._now = now
        self._started = 0.0
        self.longest = 0.0
        """The longest pause since :meth:`take_longest` last read it."""

    def install(self) -> None:
        if self._callback not in gc.callbacks:
            gc.callbacks.append(self._callback)

    def uninstall(self) -> None:
        with contextlib.suppress(ValueError):
            gc.callbacks.remove(self._callback)

    def _callback(self, phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            self._started = self._now()
            return
        pause = self._now() - self._started
        child = self._children.get(str(info.get("generation")))
        if child is not None:
            child.observe(pause)
        self.longest = max(self.longest, pause)

    def take_longest(self) -> float:
        longest, self.longest = self.longest, 0.0
        return longest


class LoopLagProbe:
    """Samples the event loop's lag: how much later than asked a sleeping task wakes.

    ``observe`` is the whole of what a sample does, so tests drive it with values and an
    injected ``now``; :meth:`run` is the task that takes the samples in the real loop."""

    def __init__(
        self,
        lag: Buckets,
        *,
        interval: float,
        warn_above: float,
        log_every: float,
        unready_above: float | None = None,
        unready_for: float = 10.0,
        gc_pauses: GcPauses | None = None,
        now: Reading = time.perf_counter,
    ) -> None:
        self._lag = lag
        self.interval, self.warn_above, self.log_every = interval, warn_above, log_every
        self.unready_above, self.unready_for = unready_above, unready_for
        self._gc = gc_pauses
        self._now = now
        self._due = math.inf  # when the pending sample's sleep should end
        self._last_log = -math.inf
        self._over_since_log = 0
        self._worst_since_log = 0.0
        self._last_unready = -math.inf  # when a sample last passed ``unready_above``

    async def run(self) -> None:
        sleep, now, interval = asyncio.sleep, self._now, self.interval
        while True:
            self._due = now() + interval
            await sleep(interval)
            # A timer may fire a hair early (uvloop's clock counts milliseconds): never below 0.
            self.observe(max(0.0, now() - self._due))

    def observe(self, lag: float) -> None:
        self._lag.observe(lag)
        bound = self.unready_above
        if bound is not None and lag > bound:
            self._last_unready = self._now()
        if lag > self.warn_above:
            self._over(lag)

    def _over(self, lag: float) -> None:
        self._over_since_log += 1
        self._worst_since_log = max(self._worst_since_log, lag)
        now = self._now()
        if now - self._last_log < self.log_every:
            return
        fields: dict[str, float | int] = {
            "loop_lag_seconds": round(lag, 6),
            "loop_lag_max_seconds": round(self._worst_since_log, 6),
            "samples_over": self._over_since_log,
        }
        if self._gc is not None:
            fields["gc_longest_pause_seconds"] = round(self._gc.take_longest(), 6)
        logger.warning(
            "The event loop ran %.3f s late (over loop_lag_warn_seconds %.3f); %d samples over "
            "since the last such line",
            lag,
            self.warn_above,
            self._over_since_log,
            extra={"fields": fields},
        )
        self._last_log, self._over_since_log, self._worst_since_log = now, 0, 0.0

    def lag_now(self) -> float:
        """How overdue the pending sample is right now (0 when it is not): a loop stuck at this
        moment shows here before its sample is taken."""
        return max(0.0, self._now() - self._due)

    def ready(self) -> bool:
        bound = self.unready_above
        if bound is None:
            return True
        if self._now() - self._last_unready < self.unready_for:
            return False
        return self.lag_now() <= bound


class LoopWatch:
    """The lag probe's task and the collector's timer, started and stopped together."""

    def __init__(self, probe: LoopLagProbe | None, gc_pauses: GcPauses | None) -> None:
        self.probe, self.gc_pauses = probe, gc_pauses
        self._task: asyncio.Task[None] | None = None

    @classmethod
    def build(cls, server: ServerConfig, metrics: GatewayMetrics) -> LoopWatch:
        """From ``server:``; ``loop_lag_interval_seconds: 0`` turns the probe off (and with it
        the readiness bound), the collector's timer stays."""
        gc_pauses = GcPauses(metrics)
        if server.loop_lag_interval_seconds == 0:
            return cls(None, gc_pauses)
        probe = LoopLagProbe(
            metrics.event_loop_lag.labels(),
            interval=server.loop_lag_interval_seconds,
            warn_above=server.loop_lag_warn_seconds,
            log_every=server.loop_lag_log_every_seconds,
            unready_above=server.loop_lag_unready_seconds,
            unready_for=server.loop_lag_unready_for_seconds,
            gc_pauses=gc_pauses,
        )
        return cls(probe, gc_pauses)

    def start(self) -> None:
        if self.gc_pauses is not None:
            self.gc_pauses.install()
        if self.probe is not None and self._task is None:
            self._task = asyncio.create_task(self.probe.run(), name="loop-lag-probe")

    async def stop(self) -> None:
        if self.gc_pauses is not None:
            self.gc_pauses.uninstall()
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    def ready(self) -> bool:
        return self.probe is None or self.probe.ready()
