"""The usage ledger's writer: rows are buffered in memory and written in batches, off the hot path.

A request only appends its row (no I/O, no ``await``); a background task writes a batch every
``interval`` seconds, or sooner once ``batch_size`` rows wait. A failed write keeps the rows and
retries. ``close`` (the app's shutdown, which SIGTERM triggers after in-flight requests finished)
writes everything still buffered, so a graceful stop loses no row::

    ledger = Ledger(SqlLedgerStore(db))
    await ledger.start()
    ledger.record(row)
    await ledger.close()
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

logger = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
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
    ) -> None:
        self.store = store
        self.batch_size = batch_size
        self.interval = interval
        self.close_timeout = close_timeout
        self._rows: list[UsageRow] = []
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._closing = False
        self.written = 0
        self.write_failures = 0

    def record(self, row: UsageRow) -> None:
        self._rows.append(row)
        if len(self._rows) >= self.batch_size:
            self._wake.set()

    @property
    def pending(self) -> int:
        return len(self._rows)

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
        """Write what is buffered, batch by batch; False (rows kept) if the store failed."""
        while self._rows:
            batch = self._rows[: self.batch_size]
            try:
                await self.store.write(batch)
            except Exception as err:  # any store failure: keep the rows and retry later
                self.write_failures += 1
                logger.warning("usage ledger write of %d rows failed: %s", len(batch), err)
                return False
            # Rows recorded while the write awaited were appended behind the batch.
            del self._rows[: len(batch)]
            self.written += len(batch)
        return True

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
        while not await self.flush():
            if loop.time() > deadline:
                logger.error("usage ledger closed with %d rows unwritten", len(self._rows))
                return
            await asyncio.sleep(0.2)
