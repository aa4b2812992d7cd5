"""The batch runner: each replica's loop that runs batch lines through the pipeline, on the
capacity interactive traffic leaves::

    runner = BatchRunner(config.batches, service.jobs, pipeline, state)
    await runner.start()      # claims lines, runs them, finalises batches, until stop()
    await runner.stop()       # the lines in flight are put back for whoever runs next

A line runs as any request does (its batch's key, limits, routing, flow control, billing):
an :class:`Incoming` with its body and no HTTP, a sink that keeps the answer. It yields:

- at most ``batches.concurrency`` lines at once on this replica;
- a line starts only while nobody waits in flow control's queue and some pool has headroom
  (the room check flow control itself makes), and asks for the ``batches.band`` band, so where
  the room went meanwhile it is shed at once instead of waiting ahead of an interactive request;
- a line shed, or refused by its key's limits, is put back (``queued``), not failed: no ledger
  row, no answer, it runs later.

A finished line's answer and its one ledger row are written in one transaction, by the owner of
its lease only (gateway/batches/jobs.py): a replica killed mid-line leaves its claim to expire,
and the line runs again elsewhere, billed once.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import time
from typing import Protocol

from prometheus_client import Gauge

from gateway.accounting.stage import Accounting, ledger_row
from gateway.auth.models import Principal
from gateway.auth.service import AuthService
from gateway.batches.config import BatchesConfig
from gateway.batches.jobs import Answer, ClaimedLine, JobStore
from gateway.batches.lines import BATCH_ENDPOINTS
from gateway.clock import Clock
from gateway.flow.bands import PRIORITY_HEADER
from gateway.flow.gate import FlowGate
from gateway.metrics import GatewayMetrics
from gateway.proxy.incoming import Incoming
from gateway.proxy.pipeline import Pipeline
from gateway.proxy.sink import Header
from gateway.runtime.table import RoutingTable
from gateway.wire.outcome import Outcome, OutcomeSlot, arrival_now

logger = logging.getLogger(__name__)

NOT_NOW = frozenset(
    (
        "shed",
        "queue_full",
        "queue_timeout",
        "rate_limit_exceeded",
        "server_overloaded",
        "rate_limiter_unavailable",
        "no_healthy_upstream",
    )
)
"""Refusals that mean "not now" for a line: it is put back and runs later."""


class RunnerState(Protocol):
    """What the runner reads of the app's state (``GatewayState`` is one)."""

    @property
    def accounting(self) -> Accounting: ...
    @property
    def auth(self) -> AuthService | None: ...
    @property
    def flow(self) -> FlowGate | None: ...
    @property
    def clock(self) -> Clock: ...
    @property
    def metrics(self) -> GatewayMetrics: ...
    @property
    def table(self) -> RoutingTable: ...


class KeptAnswer:
    """A batch line's sink: keeps the status and body; its receiver never leaves."""

    __slots__ = ("chunks", "status")

    def __init__(self) -> None:
        self.status = 0
        self.chunks: list[bytes] = []

    async def start(self, status: int, headers: list[Header]) -> None:
        self.status = status

    async def send(self, chunk: bytes) -> None:
        self.chunks.append(chunk)

    async def end(self, chunk: bytes = b"") -> None:
        self.chunks.append(chunk)

    async def departed(self) -> None:
        await asyncio.Event().wait()  # a batch's output cannot hang up


class BatchRunner:
    def __init__(
        self, config: BatchesConfig, jobs: JobStore, pipeline: Pipeline, state: RunnerState
    ) -> None:
        self.config = config
        self.jobs = jobs
        self.pipeline = pipeline
        self.state = state
        self.owner = f"{socket.gethostname()[:64]}-{os.getpid()}-{os.urandom(4).hex()}"
        """This process's name on its claims: a restarted replica is a new owner."""
        self.running: set[asyncio.Task[None]] = set()
        self._claimed: dict[asyncio.Task[None], ClaimedLine] = {}
        self._loop: asyncio.Task[None] | None = None
        self._wake = asyncio.Event()
        self._back_off_until = 0.0
        self._renewed = 0.0
        """When this replica's claims were last extended (the app's wall clock)."""
        """After a line was put back (shed, limited): no claim before this (monotonic)."""
        metrics = state.metrics
        self.lines = metrics.counter(
            "gateway_batch_lines",
            "Batch lines this replica ran, by result (completed, failed, put_back, lost_lease)",
            ["result"],
        )
        self.in_flight = Gauge(
            "gateway_batch_lines_running",
            "Batch lines running on this replica now",
            registry=metrics.registry,
        )
        self.in_flight.set_function(lambda: len(self.running))
        self.queued = Gauge(
            "gateway_batch_lines_queued",
            "Batch lines waiting to run, every replica's (as last counted by this one)",
            registry=metrics.registry,
        )

    # --- lifetime ---------------------------------------------------------------------------

    async def start(self) -> None:
        self._loop = asyncio.create_task(self._run_forever())

    async def stop(self) -> None:
        """Stop claiming; cancel the lines in flight and put them back for the next runner."""
        if self._loop is not None:
            self._loop.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._loop
        for task in list(self.running):
            task.cancel()
        if self.running:
            await asyncio.wait(set(self.running))
        for claimed in list(self._claimed.values()):
            with contextlib.suppress(Exception):
                await self.jobs.release(claimed)
        self._claimed.clear()

    async def _run_forever(self) -> None:
        while True:
            try:
                started = await self.step()
            except Exception:
                logger.exception("the batch runner's step failed; trying again shortly")
                started = 0
            if not started:
                self._wake.clear()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._wake.wait(), self.config.poll_seconds)

    # --- one step ---------------------------------------------------------------------------

    async def step(self) -> int:
        """Finalise what is due, then claim and start as many lines as there is room for;
        how many started."""
        now = self.state.clock.wall()
        for batch_id, status in await self.jobs.due(now):
            await self.jobs.finalize(batch_id, status, now=now, ttl=self.config.file_ttl_seconds)
        self.queued.set(await self.jobs.queued())
        await self._renew(now)
        free = self.config.concurrency - len(self.running)
        backing_off = time.monotonic() < self._back_off_until  # real time, like asyncio's
        if free <= 0 or backing_off or not self.has_room():
            return 0
        claimed = await self.jobs.claim(
            self.owner,
            now=now,
            lease=self.config.lease_seconds,
            limit=min(free, self.config.chunk_lines),
        )
        for line in claimed:
            task = asyncio.create_task(self._run(line))
            self.running.add(task)
            self._claimed[task] = line
            task.add_done_callback(self._ended)
        return len(claimed)

    async def _renew(self, now: float) -> None:
        """Extend this replica's claims every third of a lease while its lines run, so a line
        slower than the lease is not taken by another replica and sent upstream twice."""
        lease = self.config.lease_seconds
        if not self.running or now - self._renewed < lease / 3:
            return
        self._renewed = now
        await self.jobs.renew(self.owner, now=now, lease=lease)

    def _ended(self, task: asyncio.Task[None]) -> None:
        self.running.discard(task)
        self._claimed.pop(task, None)
        self._wake.set()  # a place is free: look for the next line now

    def has_room(self) -> bool:
        """Nobody waits in flow control's queue, and some healthy pool has headroom."""
        flow = self.state.flow
        if flow is not None and flow.queue.waiting:
            return False
        pools = [pool for pool in self.state.table.pools.values() if pool.healthy]
        return any(pool.saturation() is None for pool in pools)

    async def _run(self, claimed: ClaimedLine) -> None:
        try:
            await self._serve(claimed)
        except asyncio.CancelledError:
            raise
        except Exception:  # a bug or the store failing: the claim expires and it runs again
            logger.exception(
                "a batch line failed to run",
                extra={"fields": {"batch_id": claimed.batch_id, "line": claimed.line}},
            )

    async def _serve(self, claimed: ClaimedLine) -> None:
        principal = await self._principal(claimed)
        arrival = arrival_now(None, self.state.clock.wall)
        if isinstance(principal, bool):  # only ever False: the key is gone
            body = (
                b'{"error":{"message":"The batch\'s API key no longer exists.",'
                b'"type":"invalid_request_error","param":null,"code":"invalid_api_key"}}'
            )
            await self._finish(claimed, Answer(401, body, arrival.request_id), None)
            return
        incoming = Incoming(
            BATCH_ENDPOINTS[claimed.endpoint],
            arrival,
            principal,
            claimed.body,
            ((PRIORITY_HEADER, self.config.band.encode()),),
            None,
            "POST",
            claimed.endpoint,
            batch_id=claimed.batch_id,
        )
        sink = KeptAnswer()
        outcome = await self.pipeline.serve(incoming, sink, OutcomeSlot())
        if outcome.error_code in NOT_NOW:
            self.lines.labels("put_back").inc()
            self._back_off_until = time.monotonic() + self.config.poll_seconds
            await self.jobs.release(claimed)
            return
        status = sink.status or outcome.status
        answer = Answer(status, b"".join(sink.chunks), arrival.request_id)
        await self._finish(claimed, answer, outcome if outcome.admitted else None)

    async def _finish(self, claimed: ClaimedLine, answer: Answer, outcome: Outcome | None) -> None:
        rows = [] if outcome is None else [ledger_row(outcome, self.state.accounting.prices)]
        if await self.jobs.finish(claimed, answer, rows):
            self.lines.labels("failed" if answer.failed else "completed").inc()
        else:
            self.lines.labels("lost_lease").inc()

    async def _principal(self, claimed: ClaimedLine) -> Principal | bool | None:
        """The batch key's principal now (None: auth is off; False: the key is gone)."""
        auth = self.state.auth
        if auth is None or claimed.key_id is None:
            return None
        credential = await auth.authenticator.cache.get(claimed.key_id)
        if credential is None:
            return False
        now = self.state.clock.wall()
        if credential.expires_at is not None and now >= credential.expires_at:
            return False
        return credential.principal
