"""A cache of credentials in front of the key store, with a hard bound on staleness.

An entry is trusted for ``ttl`` seconds counted from *before* the store was read, so a key
revoked (or a tenant disabled) on any replica stops working on every replica within ``ttl``.
Concurrent misses for one key share a single store read; unknown ids are cached too (as None), so
a client retrying a wrong key does not reach the store on every request.

    cache = CredentialCache(load=lookup, ttl=5.0, max_entries=100_000)
    credential = await cache.get("a1b2c3d4e5f6")
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Generic, TypeVar

T = TypeVar("T")


@dataclass(slots=True)
class _Entry(Generic[T]):
    value: T | None
    read_at: float


class CredentialCache(Generic[T]):
    def __init__(
        self,
        load: Callable[[str], Awaitable[T | None]],
        ttl: float,
        max_entries: int,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._load = load
        self._ttl = ttl
        self._max_entries = max_entries
        self._clock = clock
        self._entries: dict[str, _Entry[T]] = {}
        self._loading: dict[str, asyncio.Future[T | None]] = {}

    async def get(self, key_id: str) -> T | None:
        entry = self._entries.get(key_id)
        if entry is not None and self._clock() - entry.read_at < self._ttl:
            return entry.value
        return await self._refresh(key_id)

    async def reread(self, key_id: str, older_than: float) -> T | None:
        """Read the store again unless the entry is younger than ``older_than`` seconds."""
        entry = self._entries.get(key_id)
        if entry is not None and self._clock() - entry.read_at < older_than:
            return entry.value
        return await self._refresh(key_id)

    def invalidate(self, key_id: str | None = None) -> None:
        """Forget one key (or all): the next use reads the store."""
        if key_id is None:
            self._entries.clear()
        else:
            self._entries.pop(key_id, None)

    def __len__(self) -> int:
        return len(self._entries)

    async def _refresh(self, key_id: str) -> T | None:
        pending = self._loading.get(key_id)
        if pending is None:
            pending = asyncio.ensure_future(self._load_and_keep(key_id))
            self._loading[key_id] = pending
            pending.add_done_callback(lambda _: self._loading.pop(key_id, None))
        # Shielded: one caller giving up (client gone) must not cancel the read for the others.
        return await asyncio.shield(pending)

    async def _load_and_keep(self, key_id: str) -> T | None:
        read_at = self._clock()
        value = await self._load(key_id)
        if len(self._entries) >= self._max_entries:
            self._entries.clear()  # crude but bounded; a full cache means an id-guessing client
        self._entries[key_id] = _Entry(value, read_at)
        return value
