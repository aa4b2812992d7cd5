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
from gateway.limits.budgets import (
    PERIOD_CODES,
    Budget,
    BudgetAlert,
    MoneyState,
    period_index,
    period_reset,
)
from gateway.limits.maths import SubjectState, check, quotas
from gateway.limits.redis_script import ACQUIRE, SETTLE
from gateway.limits.types import (
    AlertSink,
    BackendUnavailable,
    Decision,
    Refusal,
    Subject,
    Ticket,
    no_alerts,
)

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
        on_alert: AlertSink = no_alerts,
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
        self._queue: list[tuple[Ticket, int, int]] = []
        self._settler: asyncio.Task[None] | None = None
        self.settle_failures = 0
        self.on_alert = on_alert

    def _keys(self, subjects: tuple[Subject, ...]) -> list[str]:
        # One hash tag for every key: a script's keys must share a slot on Redis Cluster.
        hashes = [f"{{{self._prefix}}}:{s.name}" for s in subjects]
        return hashes + [h + ":inflight" for h in hashes]

    def _now(self) -> str:
        return "" if self._clock is None else repr(self._clock())

    async def acquire(
        self, subjects: tuple[Subject, ...], tokens: int, request_id: str, money: int = 0
    ) -> Decision:
        args: list[str | int | float] = [
            self._now(),
            tokens,
            request_id,
            self._lease,
            len(subjects),
            money,
        ]
        for s in subjects:
            lim = s.limits
            args += [
                _arg(lim.requests_per_minute),
                _arg(lim.tokens_per_minute),
                _arg(lim.concurrent_requests),
                _arg(lim.daily_tokens),
                *_budget_args(lim.budget),
            ]
        try:
            reply = await self._acquire(keys=self._keys(subjects), args=args)
        except (RedisError, OSError) as err:
            raise BackendUnavailable(f"Redis: {type(err).__name__}: {err}") from None
        admitted, now, day = int(reply[0]), float(reply[1]), int(reply[2])
        states = [
            SubjectState(
                Bucket(float(reply[3 + 6 * i]), now),
                Bucket(float(reply[4 + 6 * i]), now),
                int(reply[5 + 6 * i]),
                day,
                int(reply[6 + 6 * i]),
                MoneyState(int(reply[7 + 6 * i]), int(reply[8 + 6 * i])),
            )
            for i in range(len(subjects))
        ]
        requests, token_quota = quotas(subjects, states)
        if admitted:
            periods = tuple(st.money.period for st in states)
            ticket = Ticket(subjects, tokens, request_id, day, money, periods)
            return Decision(ticket, None, requests, token_quota)
        refusal = _refusal(subjects, states, tokens, now, money)
        return Decision(None, refusal, requests, token_quota)

    def settle(self, ticket: Ticket, used_tokens: int, used_money: int = 0) -> None:
        """Queue the settlement; one background task sends what queued up as one batch, so
        under load a single script call settles many requests."""
        self._queue.append((ticket, used_tokens, used_money))
        if self._settler is None:
            self._settler = asyncio.get_running_loop().create_task(self._settle_queued())

    async def _settle_queued(self) -> None:
        try:
            while self._queue:
                batch, self._queue = self._queue[:SETTLE_BATCH], self._queue[SETTLE_BATCH:]
                await self._send_settle(batch)
        finally:
            self._settler = None

    async def _send_settle(self, batch: list[tuple[Ticket, int, int]]) -> None:
        keys: list[str] = []
        args: list[str | int | float] = [self._now(), len(batch)]
        for ticket, used, cost in batch:
            keys += self._keys(ticket.subjects)
            n = len(ticket.subjects)
            args += [ticket.tokens, used, ticket.request_id, ticket.day, n, ticket.money, cost]
            for s, period in zip(ticket.subjects, ticket.periods or (-1,) * n, strict=True):
                lim = s.limits
                args += [_arg(lim.tokens_per_minute), _arg(lim.daily_tokens)]
                args += [*_budget_args(lim.budget)[:2], period, _thresholds(lim.budget)]
        for attempt in range(3):
            try:
                fired = await self._settle(keys=keys, args=args)
                self._alerts(batch, fired)
                return
            except (RedisError, OSError) as err:
                if attempt == 2:
                    # The reservations stay taken until they refill; the slots until their lease.
                    self.settle_failures += len(batch)
                    logger.warning("%d rate limit settlements lost: %s", len(batch), err)
                    return
                await asyncio.sleep(0.05 * (attempt + 1))

    def _alerts(self, batch: list[tuple[Ticket, int, int]], fired: list[int]) -> None:
        """Hand on the alerts the script decided: 5 numbers each (see ``redis_script.py``)."""
        for at in range(0, len(fired), 5):
            place, index, threshold, spent, period = (int(v) for v in fired[at : at + 5])
            subject = batch[place - 1][0].subjects[index - 1]
            budget = subject.limits.budget
            assert budget is not None  # the script fires only for subjects with a budget
            resets = period_reset(budget.period, period)
            self.on_alert(
                BudgetAlert(
                    subject.scope,
                    subject.id,
                    threshold,
                    spent,
                    budget.micros,
                    budget.period,
                    resets,
                )
            )

    async def budget_state(self, subject: Subject) -> tuple[int, int, int]:
        budget = subject.limits.budget
        if budget is None:
            return -1, 0, 0
        try:
            seconds, micros = await self._redis.time()
            now = self._clock() if self._clock is not None else seconds + micros / 1e6
            key = self._keys((subject,))[0]
            period, committed, spent = await self._redis.hmget(key, ["mp", "mc", "ms"])
        except (RedisError, OSError) as err:
            raise BackendUnavailable(f"Redis: {type(err).__name__}: {err}") from None
        current = period_index(budget.period, now)
        if period is None or int(period) != current:
            return current, 0, 0
        return current, int(committed or 0), int(spent or 0)

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


def _budget_args(budget: Budget | None) -> tuple[int, int, int]:
    """(amount, period kind, hard) for the script; no budget: (-1, 0, 0)."""
    if budget is None:
        return NO_LIMIT, 0, 0
    return budget.micros, PERIOD_CODES[budget.period], int(budget.hard)


def _thresholds(budget: Budget | None) -> str:
    return "" if budget is None else ",".join(map(str, budget.alert_thresholds))


def _refusal(
    subjects: tuple[Subject, ...],
    states: list[SubjectState],
    tokens: int,
    now: float,
    money: int,
) -> Refusal:
    for subject, state in zip(subjects, states, strict=True):
        refusal = check(subject, state, tokens, now, money)
        if refusal is not None:
            return refusal
    raise AssertionError("the script refused a request that every limit admits")
