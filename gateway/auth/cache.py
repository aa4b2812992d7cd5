"""A cache of credentials in front of the key store, with a hard bound on staleness.

An entry is trusted for ``ttl`` seconds counted from *before* the store was read, so a key
revoked (or a tenant disabled) on any replica stops working on every replica within ``ttl``.
Concurrent misses for one key share a single store read.

Unknown ids are cached too (a negative cache), apart from the known ones and bounded on their own,
so a client inventing ids can neither evict real keys nor grow memory. Reading the store for an id
it has no entry for takes a token from a failure budget (a token bucket refilled at
``unknown_rate`` per second), given back when the id turns out to be a real key. With the budget
spent, such reads go one at a time through a slow lane with a short queue, and ids beyond the
queue are refused unread: an id-guessing flood costs the store one query at a time, while a real
key not yet cached (after a restart, say) still gets through. Cached keys never wait.

    cache = CredentialCache(load=lookup, ttl=5.0, max_entries=100_000)
    credential = await cache.get("a1b2c3d4e5f6")
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Generic, TypeVar

from gateway.bucket import Bucket
from gateway.clock import Reading

T = TypeVar("T")


@dataclass(slots=True)
class _Entry(Generic[T]):
    value: T | None
    read_at: float


class FailureBudget:
    """``burst`` failures at once, refilled at ``rate`` per second (a :class:`Bucket`)."""

    def __init__(self, rate: float, burst: float, clock: Reading) -> None:
        self.rate, self.burst, self.clock = rate, burst, clock
        self.bucket = Bucket(burst, clock())

    def available(self) -> bool:
        self.bucket.refill(self.rate, self.burst, self.clock())
        return self.bucket.level >= 1

    def take(self) -> bool:
        return self.available() and self.bucket.take()

    def give_back(self) -> None:
        self.bucket.give_back(1, self.burst)


class CredentialCache(Generic[T]):
    def __init__(
        self,
        load: Callable[[str], Awaitable[T | None]],
        ttl: float,
        max_entries: int,
        clock: Reading = time.monotonic,
        *,
        max_unknown: int = 10_000,
        unknown_rate: float = 20.0,
        unknown_burst: float = 100.0,
        slow_lane_queue: int = 32,
    ) -> None:
        self._load = load
        self._ttl = ttl
        self._max_entries = max_entries
        self._max_unknown = max_unknown
        self._clock = clock
        self._entries: dict[str, _Entry[T]] = {}
        self._unknown: dict[str, float] = {}  # id -> read_at, oldest first
        self._loading: dict[str, asyncio.Future[T | None]] = {}
        self.budget = FailureBudget(unknown_rate, unknown_burst, clock)
        self._slow_lane = asyncio.Lock()
        self._slow_waiting = 0
        self._slow_lane_queue = slow_lane_queue
        self.refused = 0
        """Lookups refused unread: the budget spent and the slow lane's queue full."""

    async def get(self, key_id: str) -> T | None:
        return await self.reread(key_id, self._ttl)

    async def reread(self, key_id: str, older_than: float) -> T | None:
        """Read the store again unless the entry is younger than ``older_than`` seconds."""
        entry = self._entries.get(key_id)
        if entry is not None:
            if self._clock() - entry.read_at < older_than:
                return entry.value
        elif (read_at := self._unknown.get(key_id)) is not None and (
            self._clock() - read_at < older_than
        ):
            return None
        return await self._refresh(key_id)

    def invalidate(self, key_id: str | None = None) -> None:
        """Forget one key (or all): the next use reads the store."""
        if key_id is None:
            self._entries.clear()
            self._unknown.clear()
        else:
            self._entries.pop(key_id, None)
            self._unknown.pop(key_id, None)

    def __len__(self) -> int:
        return len(self._entries) + len(self._unknown)

    async def _refresh(self, key_id: str) -> T | None:
        pending = self._loading.get(key_id)
        if pending is not None or key_id in self._entries:
            return await self._shared_read(key_id)
        if self.budget.take():
            return await self._shared_read(key_id, budgeted=True)
        if self._slow_waiting >= self._slow_lane_queue:
            self.refused += 1
            return None
        self._slow_waiting += 1
        try:
            async with self._slow_lane:
                return await self._shared_read(key_id)
        finally:
            self._slow_waiting -= 1

    async def _shared_read(self, key_id: str, budgeted: bool = False) -> T | None:
        pending = self._loading.get(key_id)
        if pending is None:
            pending = asyncio.ensure_future(self._load_and_keep(key_id, budgeted))
            self._loading[key_id] = pending
            pending.add_done_callback(lambda _: self._loading.pop(key_id, None))
        elif budgeted:
            self.budget.give_back()
        # Shielded: one caller giving up (client gone) must not cancel the read for the others.
        return await asyncio.shield(pending)

    async def _load_and_keep(self, key_id: str, budgeted: bool) -> T | None:
        read_at = self._clock()
        value = await self._load(key_id)
        if value is None:
            self._entries.pop(key_id, None)
            self._unknown.pop(key_id, None)  # re-inserted last: the oldest go first
            if len(self._unknown) >= self._max_unknown:
                del self._unknown[next(iter(self._unknown))]
            self._unknown[key_id] = read_at
            return None
        if budgeted:
            self.budget.give_back()  # a real key: not a failure
        if len(self._entries) >= self._max_entries:
            self._entries.clear()  # crude but bounded: more real keys than the bound allows
        self._unknown.pop(key_id, None)
        self._entries[key_id] = _Entry(value, read_at)
        return value
