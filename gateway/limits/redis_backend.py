"""The Redis limiter backend: one set of counters shared by every gateway replica.

Each admission is one ``EVALSHA`` of an atomic script (see ``redis_script.py``); settlements are
sent in batches from a background task, so a request that is being torn down still settles and the
response never waits for it. ``aclose`` waits for the settlements still on their way::

    limiter = RedisLimiter("redis://127.0.0.1:6379/0", prefix="pdgw:rl")
    decision = await limiter.acquire(subjects, tokens=1200, request_id="r1")
    limiter.settle(decision.ticket, used_tokens=800)
    await limiter.aclose()
"""

from __future__ import annotations

import asyncio
import logging

import redis.asyncio as aioredis
from redis.exceptions import RedisError

from gateway.bucket import Bucket
from gateway.clock import Reading
from gateway.limits.maths import SubjectState, check, quotas
from gateway.limits.redis_script import ACQUIRE, SETTLE
from gateway.limits.types import BackendUnavailable, Decision, Refusal, Subject, Ticket

logger = logging.getLogger(__name__)

NO_LIMIT = -1
SETTLE_BATCH = 200


class RedisLimiter:
    def __init__(
        self,
        url: str,
        *,
        prefix: str,
        lease: float = 3600.0,
        max_connections: int = 64,
        timeout: float = 0.5,
        clock: Reading | None = None,
    ) -> None:
        pool = aioredis.BlockingConnectionPool.from_url(
            url,
            max_connections=max_connections,
            timeout=timeout,
            socket_timeout=timeout,
            socket_connect_timeout=timeout,
        )
        self._redis = aioredis.Redis.from_pool(pool)  # owns the pool: aclose closes it
        self._acquire = self._redis.register_script(ACQUIRE)
        self._settle = self._redis.register_script(SETTLE)
        self._prefix = prefix
        self._lease = lease
        self._clock = clock  # None: Redis's own clock, the same for every replica
        self._queue: list[tuple[Ticket, int]] = []
        self._settler: asyncio.Task[None] | None = None
        self.settle_failures = 0

    def _keys(self, subjects: tuple[Subject, ...]) -> list[str]:
        # One hash tag for every key: a script's keys must share a slot on Redis Cluster.
        hashes = [f"{{{self._prefix}}}:{s.name}" for s in subjects]
        return hashes + [h + ":inflight" for h in hashes]

    def _now(self) -> str:
        return "" if self._clock is None else repr(self._clock())

    async def acquire(
        self, subjects: tuple[Subject, ...], tokens: int, request_id: str
    ) -> Decision:
        args: list[str | int | float] = [
            self._now(),
            tokens,
            request_id,
            self._lease,
            len(subjects),
        ]
        for s in subjects:
            lim = s.limits
            args += [
                _arg(lim.requests_per_minute),
                _arg(lim.tokens_per_minute),
                _arg(lim.concurrent_requests),
                _arg(lim.daily_tokens),
            ]
        try:
            reply = await self._acquire(keys=self._keys(subjects), args=args)
        except (RedisError, OSError) as err:
            raise BackendUnavailable(f"Redis: {type(err).__name__}: {err}") from None
        admitted, now, day = int(reply[0]), float(reply[1]), int(reply[2])
        states = [
            SubjectState(
                Bucket(float(reply[3 + 4 * i]), now),
                Bucket(float(reply[4 + 4 * i]), now),
                int(reply[5 + 4 * i]),
                day,
                int(reply[6 + 4 * i]),
            )
            for i in range(len(subjects))
        ]
        requests, token_quota = quotas(subjects, states)
        if admitted:
            return Decision(Ticket(subjects, tokens, request_id, day), None, requests, token_quota)
        return Decision(None, _refusal(subjects, states, tokens, now), requests, token_quota)

    def settle(self, ticket: Ticket, used_tokens: int) -> None:
        """Queue the settlement; one background task sends what queued up as one batch, so
        under load a single script call settles many requests."""
        self._queue.append((ticket, used_tokens))
        if self._settler is None:
            self._settler = asyncio.get_running_loop().create_task(self._settle_queued())

    async def _settle_queued(self) -> None:
        try:
            while self._queue:
                batch, self._queue = self._queue[:SETTLE_BATCH], self._queue[SETTLE_BATCH:]
                await self._send_settle(batch)
        finally:
            self._settler = None

    async def _send_settle(self, batch: list[tuple[Ticket, int]]) -> None:
        keys: list[str] = []
        args: list[str | int | float] = [self._now(), len(batch)]
        for ticket, used in batch:
            keys += self._keys(ticket.subjects)
            args += [ticket.tokens, used, ticket.request_id, ticket.day, len(ticket.subjects)]
            for s in ticket.subjects:
                args += [_arg(s.limits.tokens_per_minute), _arg(s.limits.daily_tokens)]
        for attempt in range(3):
            try:
                await self._settle(keys=keys, args=args)
                return
            except (RedisError, OSError) as err:
                if attempt == 2:
                    # The reservations stay taken until they refill; the slots until their lease.
                    self.settle_failures += len(batch)
                    logger.warning("%d rate limit settlements lost: %s", len(batch), err)
                    return
                await asyncio.sleep(0.05 * (attempt + 1))

    async def ping(self) -> bool:
        try:
            return bool(await self._redis.ping())
        except RedisError:
            return False

    async def drain(self) -> None:
        while self._settler is not None:
            await asyncio.shield(self._settler)

    async def aclose(self) -> None:
        await self.drain()
        await self._redis.aclose()


def _arg(value: int | None) -> int:
    return NO_LIMIT if value is None else value


def _refusal(
    subjects: tuple[Subject, ...], states: list[SubjectState], tokens: int, now: float
) -> Refusal:
    for subject, state in zip(subjects, states, strict=True):
        refusal = check(subject, state, tokens, now)
        if refusal is not None:
            return refusal
    raise AssertionError("the script refused a request that every limit admits")
