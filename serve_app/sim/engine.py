"""The simulated engine's loop: steps the scheduler in real time and wakes each request's stream.

One task per simulator process (started by the first request): while there is work it asks the
scheduler for a step, sleeps the step's simulated cost, completes it and wakes the requests that
produced a token. A request waits on its own :class:`asyncio.Event`; tokens that arrive while it
is sending are counted, not lost::

    engine = SimEngine(capacity, metrics)
    async with engine.request(tokens, max_tokens) as run:
        async for k in run.tokens():   # 0, 1, ... as the engine produces them
            ...
        run.seq.cached_tokens
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field

from serve_app.sim.capacity import CapacitySettings
from serve_app.sim.scheduler import Scheduler
from serve_app.sim.scheduler import Sequence as Seq
from serve_app.sim.vllm_metrics import VllmMetrics


@dataclass(eq=False, slots=True)
class EngineRun:
    """One request's handle: its sequence and the event the engine sets on progress."""

    seq: Seq
    arrived_at: float
    transfer_s: float
    link: asyncio.Semaphore | None = None
    """The KV link's places (``kv_transfer_parallel``); None: any number of transfers at once."""
    observe_ttft: Callable[[float], None] | None = None
    """Told the time to first token once the KV has moved (a PD pool's TTFT includes the wait
    for the link, which only this run sees)."""
    clock: Callable[[], float] = time.monotonic
    woken: asyncio.Event = field(default_factory=asyncio.Event)

    async def tokens(self) -> AsyncIterator[int]:
        """Token indexes as the engine produces them; ends when the request is done."""
        sent = 0
        while True:
            while sent < self.seq.output_tokens:
                yield sent
                sent += 1
            if self.seq.finished:
                return
            self.woken.clear()
            await self.woken.wait()
            if sent == 0 and self.transfer_s > 0 and self.seq.output_tokens:
                await self._transfer()  # PD: the KV moves before decode answers

    async def _transfer(self) -> None:
        if self.link is None:
            await asyncio.sleep(self.transfer_s)
        else:
            async with self.link:
                await asyncio.sleep(self.transfer_s)
        if self.observe_ttft is not None:
            self.observe_ttft(self.clock() - self.arrived_at)


class RequestTooLarge(Exception):
    """The request's prompt plus max_tokens needs more KV blocks than the engine has."""


class SimEngine:
    """A scheduler driven by the event loop's clock; ``clock`` is injectable for the TTFT figure."""

    def __init__(
        self,
        capacity: CapacitySettings,
        metrics: VllmMetrics,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.capacity = capacity
        self.scheduler = Scheduler(capacity)
        self.metrics = metrics
        self._clock = clock
        self._runs: dict[Seq, EngineRun] = {}
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        parallel = capacity.kv_transfer_parallel
        self._link = asyncio.Semaphore(parallel) if parallel > 0 else None

    def check(self, prompt_tokens: int, max_tokens: int) -> None:
        blocks = -(-(prompt_tokens + max_tokens) // self.capacity.block_size)
        if blocks > self.capacity.num_gpu_blocks:
            raise RequestTooLarge(
                f"the request needs {blocks} KV blocks; the simulated engine has "
                f"{self.capacity.num_gpu_blocks}"
            )

    @asynccontextmanager
    async def request(self, tokens: Sequence[str], max_tokens: int) -> AsyncIterator[EngineRun]:
        """Queue a request; leaving the block early (the client left) aborts it."""
        self.check(len(tokens), max_tokens)
        seq = Seq(tokens, max_tokens)
        transfer = self.capacity.kv_transfer_per_token_ms * len(tokens) / 1000
        run = EngineRun(
            seq, self._clock(), transfer, self._link, self.metrics.observe_ttft, self._clock
        )
        self._runs[seq] = run
        self.scheduler.add(seq)
        self._ensure_running()
        try:
            yield run
        finally:
            self.scheduler.abort(seq)
            self._runs.pop(seq, None)

    def _ensure_running(self) -> None:
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(self._loop())
        self._wake.set()

    async def _loop(self) -> None:
        while True:
            if not self.scheduler.has_work():
                self._wake.clear()
                await self._wake.wait()
                continue
            batch = self.scheduler.schedule()
            await asyncio.sleep(batch.seconds)
            now = self._clock()
            for seq in self.scheduler.complete(batch):
                run = self._runs.get(seq)
                if run is None:
                    continue
                if seq.output_tokens == 1 and run.transfer_s == 0:
                    self.metrics.observe_ttft(now - run.arrived_at)
                run.woken.set()

    async def aclose(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
