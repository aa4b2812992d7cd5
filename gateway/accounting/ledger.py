"""The usage ledger's writer: rows are buffered in memory and written in batches, off the hot path.

A request only appends its row (no I/O, no ``await``); a background task writes a batch every
``interval`` seconds, or sooner once ``batch_size`` rows wait. A failed write keeps the rows and
retries. ``close`` (the app's shutdown, which SIGTERM triggers after in-flight requests finished)
writes everything still buffered, so a graceful stop loses no row.

While the store is down the buffer is bounded: past ``max_buffered`` rows the oldest batch is
appended to ``spill_path`` (JSON lines, a few hundred microseconds per batch) and read back once
the store answers again, or at the next start after a crash; ``spilled`` counts the rows there::

    ledger = Ledger(SqlLedgerStore(db))
    await ledger.start()
    ledger.record(row)
    await ledger.close()
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Protocol

import orjson

from gateway.values import value

logger = logging.getLogger(__name__)


@value
class UsageRow:
    """One request, as billed: who, what, how many tokens, how it went."""

    created_at: float
    request_id: str
    tenant_id: str | None
    key_id: str | None
    model: str
    pool: str | None
    variant: str | None
    input_tokens: int
    output_tokens: int
    cached_tokens: int
    ttft_ms: float | None
    duration_ms: float
    status: int
    partial: bool
    correlation_id: str | None = None
    """The client's own ``x-request-id``, when it sent one (``request_id`` is the gateway's)."""
    operation: str | None = None
    """What the client asked for (``chat/completions``, ``responses``...): a Responses request
    is billed like chat, and its row says which API it came through."""
    cost_micros: int | None = None
    """What the row's tokens cost, in micro-units of the price's currency (None: the model has
    no price), computed once when the row is built (``gateway.accounting.prices.cost``)."""
    price_version: str | None = None
    """The price it was computed with (``USD-<digest>``: the currency and a hash of the price)."""
    batch_id: str | None = None
    """The batch the request was a line of (priced with the batch discount); None: interactive."""


class LedgerStore(Protocol):
    async def write(self, rows: Sequence[UsageRow]) -> None: ...


class Ledger:
    def __init__(
        self,
        store: LedgerStore,
        *,
        batch_size: int = 500,
        interval: float = 0.5,
        close_timeout: float = 20.0,
        max_buffered: int = 50_000,
        spill_path: Path | None = None,
    ) -> None:
        self.store = store
        self.max_buffered = max_buffered
        self.spill_path = spill_path
        self.spilled = _count_lines(spill_path)  # rows left by an earlier run are written too
        self._warned = False
        self.batch_size = batch_size
        self.interval = interval
        self.close_timeout = close_timeout
        self._rows: list[UsageRow] = []
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._flushing = asyncio.Lock()
        """One flush at a time: two would both take the head of the buffer and write it twice."""
        self._closing = False
        self.written = 0
        self.write_failures = 0

    def record(self, row: UsageRow) -> None:
        self._rows.append(row)
        if len(self._rows) >= self.batch_size:
            self._wake.set()
        if len(self._rows) > self.max_buffered:
            self._spill()

    @property
    def pending(self) -> int:
        return len(self._rows) + self.spilled

    def _spill(self) -> None:
        if self.spill_path is None:
            if not self._warned:
                logger.error("usage ledger: %d rows buffered, no spill file", len(self._rows))
                self._warned = True
            return
        batch, self._rows = self._rows[: self.batch_size], self._rows[self.batch_size :]
        lines = b"".join(orjson.dumps(dataclasses.asdict(r)) + b"\n" for r in batch)
        fd = os.open(self.spill_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        try:
            os.write(fd, lines)
        finally:
            os.close(fd)
        self.spilled += len(batch)

    async def _write_spilled(self) -> bool:
        """Write the spill file back, then remove it; False (file kept) if the store failed.
        Rows are written at least once: a crash between the write and the removal repeats them
        (``request_id`` tells them apart)."""
        if not self.spilled or self.spill_path is None:
            return True
        rows = [
            UsageRow(**orjson.loads(line)) for line in self.spill_path.read_bytes().splitlines()
        ]
        for start in range(0, len(rows), self.batch_size):
            try:
                await self.store.write(rows[start : start + self.batch_size])
            except Exception as err:
                self.write_failures += 1
                logger.warning("usage ledger: spilled rows not written yet: %s", err)
                self._keep(rows[start:])
                return False
        self.spill_path.unlink()
        self.written += len(rows)
        self.spilled = 0
        return True

    def _keep(self, rows: list[UsageRow]) -> None:
        """Rewrite the spill file with the rows still to write."""
        assert self.spill_path is not None
        draft = self.spill_path.with_name(self.spill_path.name + ".tmp")
        draft.write_bytes(b"".join(orjson.dumps(dataclasses.asdict(r)) + b"\n" for r in rows))
        os.chmod(draft, 0o600)
        draft.replace(self.spill_path)
        self.spilled = len(rows)

    async def start(self) -> None:
        self._task = asyncio.create_task(self._run())

    async def _run(self) -> None:
        while not self._closing:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), self.interval)
            self._wake.clear()
            if not self._closing and not await self.flush():
                await asyncio.sleep(self.interval)  # the store failed: back off, then retry

    async def flush(self) -> bool:
        """Write what is buffered now, batch by batch; False (rows kept) if the store failed.

        Rows recorded while it writes wait for the next flush: chasing them would, under a steady
        trickle, write a batch of the few rows that came during each write (4-row batches at
        1,000 requests/s, one request at a time), and a batch's fixed cost (a transaction, the
        daily totals' upsert compiled anew) then dominated the gateway's CPU (README,
        Performance)."""
        async with self._flushing:
            return await self._flush()

    async def _flush(self) -> bool:
        remaining = len(self._rows)
        while remaining > 0:
            batch = self._rows[: min(self.batch_size, remaining)]
            try:
                await self.store.write(batch)
            except Exception as err:  # any store failure: keep the rows and retry later
                self.write_failures += 1
                logger.warning("usage ledger write of %d rows failed: %s", len(batch), err)
                return False
            # Rows recorded while the write awaited were appended behind the batch.
            del self._rows[: len(batch)]
            self.written += len(batch)
            remaining -= len(batch)
        return await self._write_spilled()

    async def close(self) -> None:
        """Stop the writer, then write every buffered row (retrying up to ``close_timeout``)."""
        # Not cancelled: a write cut in the middle could be committed and then written again.
        self._closing = True
        self._wake.set()
        if self._task is not None:
            await self._task
            self._task = None
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.close_timeout
        while True:
            written = await self.flush()
            if written and not self._rows:  # rows recorded while closing included
                return
            if loop.time() > deadline:
                logger.error("usage ledger closed with %d rows unwritten", len(self._rows))
                return
            if not written:
                await asyncio.sleep(0.2)  # the store failed: retry until the deadline


def _count_lines(path: Path | None) -> int:
    if path is None or not path.exists():
        return 0
    return path.read_bytes().count(b"\n")
