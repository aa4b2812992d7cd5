"""The deployment's canary judgement in Redis: shared samples, one decision.

On ``load_sharing``'s one client where the load is shared (``load_sharing.backend: redis``, the
load book's client), else, as before issue 35, on a client of its own in the rate limits' Redis.

Per model, under one hash tag (a script's keys must share a slot on Redis Cluster):

- ``{PREFIX:MODEL}:samples:VARIANT``: a sorted set of outcomes scored by Redis's own clock (one
  clock for every replica); members ``replica|seq|error|ttft``. :data:`PUSH_AND_READ` adds what a
  replica saw since its last push, drops what left the window (and the oldest beyond
  ``MAX_SAMPLES``) and returns the window: every replica judges the same samples.
- ``{PREFIX:MODEL}:state``: a hash; ``rollback:VARIANT`` = ``{"reason", "at", "by"}`` while the
  variant is rolled back (set with ``HSETNX``: the first replica to judge it bad decides, once);
  ``weight:VARIANT`` = ``{"weight", "at", "by"}``, the operator's last weight (deleting the
  rollback and the samples in the same transaction: re-enabling starts a fresh window).

Every ``SYNC_SECONDS`` a replica reads the state and applies it; every ``JUDGE_SECONDS`` it pushes
its samples and judges. Requests never wait on Redis: a replica that cannot reach it keeps serving
on what it knew, logs it, and catches up when Redis is back (a rollback it holds is published
again).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

import orjson
import redis.asyncio as aioredis
from redis.exceptions import RedisError

from gateway.clock import SYSTEM_CLOCK, Clock
from gateway.errors import RoutingStateUnavailable
from gateway.routing.canary import summarise, verdict
from gateway.routing.canary_judges import Routers, apply_weight
from gateway.routing.metrics import RoutingMetrics
from gateway.routing.router import ModelRouter, Variant

logger = logging.getLogger(__name__)

SYNC_SECONDS = 0.25
"""How often a replica reads the rollback state: the bound on how late it stops a variant."""
JUDGE_SECONDS = 1.0
MAX_SAMPLES = 4096
"""Per variant: the window's newest outcomes judged (bounds Redis memory and each read)."""

PUSH_AND_READ = """
local t = redis.call('TIME')
local now = tonumber(t[1]) + tonumber(t[2]) / 1000000
local window = tonumber(ARGV[1])
local cap = tonumber(ARGV[2])
local i = 3
local out = {}
for k = 1, #KEYS do
  local n = tonumber(ARGV[i])
  i = i + 1
  for _ = 1, n do
    redis.call('ZADD', KEYS[k], now, ARGV[i])
    i = i + 1
  end
  redis.call('ZREMRANGEBYSCORE', KEYS[k], '-inf', '(' .. tostring(now - window))
  local size = redis.call('ZCARD', KEYS[k])
  if size > cap then redis.call('ZREMRANGEBYRANK', KEYS[k], 0, size - cap - 1) end
  if size > 0 then redis.call('PEXPIRE', KEYS[k], math.ceil(window * 1000) + 1000) end
  out[k] = redis.call('ZRANGE', KEYS[k], 0, -1)
end
return out
"""


class RedisCanaries:
    shared = True

    def __init__(
        self,
        url: str | None,
        *,
        prefix: str,
        metrics: RoutingMetrics,
        timeout: float = 0.5,
        sync_seconds: float = SYNC_SECONDS,
        judge_seconds: float = JUDGE_SECONDS,
        clock: Clock = SYSTEM_CLOCK,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        client: aioredis.Redis | None = None,
    ) -> None:
        """``client``: a Redis client another part owns and closes (``load_sharing``'s one,
        shared with the load book); else one of its own on ``url``."""
        self._owns_client = client is None
        if client is None:
            assert url is not None
            client = aioredis.Redis.from_url(
                url, socket_timeout=timeout, socket_connect_timeout=timeout
            )
        self._redis = client
        self._push_and_read = self._redis.register_script(PUSH_AND_READ)
        self._prefix = prefix
        self.metrics = metrics
        self.replica = uuid.uuid4().hex[:12]
        """Names this replica in the rollback record (``decided_by``)."""
        self._seq = 0
        self._sync_seconds = sync_seconds
        self._judge_seconds = judge_seconds
        self._task: asyncio.Task[None] | None = None
        self._failing = False
        self._clock = clock  # the decisions' times and when the loop judges
        self._sleep = sleep  # the wait between syncs: a test decides when the next sync runs

    def describe(self) -> str:
        return f"redis (replica {self.replica})"

    def _key(self, router: ModelRouter, part: str) -> str:
        return f"{{{self._prefix}:{router.name}}}:{part}"

    async def start(self, routers: Routers) -> None:
        self._task = asyncio.create_task(self._run(routers))

    async def aclose(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        if self._owns_client:
            await self._redis.aclose()

    async def _run(self, routers: Routers) -> None:
        judged_at = 0.0
        while True:
            now = self._clock.monotonic()
            judge = now - judged_at >= self._judge_seconds
            if judge:
                judged_at = now
            try:
                await self.sync(routers, judge=judge)
                self._recovered()
            except (RedisError, OSError) as err:
                self._failed(err)
            await self._sleep(self._sync_seconds)

    async def sync(self, routers: Routers, *, judge: bool) -> None:
        """Push and judge (``judge``), then read and apply the rollback state, per model."""
        for router in routers():
            if router.canary is None or len(router.variants) == 1:
                continue
            if judge:
                await self._judge(router)
            await self._apply(router)

    async def _judge(self, router: ModelRouter) -> None:
        canary = router.canary
        assert canary is not None
        variants = list(router.variants.values())
        args: list[Any] = [canary.window_seconds, MAX_SAMPLES]
        for variant in variants:
            unsent, variant.unsent = variant.unsent, []
            args.append(len(unsent))
            args.extend(self._member(error, ttft) for error, ttft in unsent)
        keys = [self._key(router, "samples:" + v.name) for v in variants]
        windows = await self._push_and_read(keys=keys, args=args)
        summaries = {
            v.name: summarise(_parse(member) for member in window)
            for v, window in zip(variants, windows, strict=True)
        }
        baseline = summaries[canary.baseline]
        for variant in router.candidates():
            reason = verdict(summaries[variant.name], baseline, canary)
            if reason is not None:
                await self._decide(router, variant, reason)

    def _member(self, error: bool, ttft: float | None) -> str:
        self._seq += 1
        return f"{self.replica}|{self._seq}|{int(error)}|{'' if ttft is None else repr(ttft)}"

    async def _decide(self, router: ModelRouter, variant: Variant, reason: str) -> None:
        at = self._clock.wall()
        record = {"reason": reason, "at": at, "by": self.replica}
        state = self._key(router, "state")
        if await self._redis.hsetnx(state, "rollback:" + variant.name, orjson.dumps(record)):
            router.roll_back(variant, reason, self.replica, decided_here=True, decided_at=at)
        # else another replica decided first: applied from the state, just below

    async def _apply(self, router: ModelRouter) -> None:
        fields = await self._redis.hgetall(self._key(router, "state"))
        state = {_text(k): orjson.loads(v) for k, v in fields.items()}
        for variant in router.variants.values():
            rollback = state.get("rollback:" + variant.name)
            weight = state.get("weight:" + variant.name)
            if rollback is not None:
                router.roll_back(
                    variant,
                    rollback["reason"],
                    rollback["by"],
                    decided_here=False,
                    decided_at=rollback["at"],
                )
            elif weight is not None and weight["at"] != variant.weight_event_at:
                variant.weight_event_at = weight["at"]
                apply_weight(router, variant.name, weight["weight"], weight["by"], self.metrics)
            elif variant.rolled_back and variant.rollback is not None:
                await self._republish(router, variant)

    async def _republish(self, router: ModelRouter, variant: Variant) -> None:
        """A rollback this replica holds that Redis lost (restarted, flushed): keep it shared."""
        event = variant.rollback
        assert event is not None
        record = {"reason": event.reason, "at": event.at, "by": event.by}
        await self._redis.hsetnx(
            self._key(router, "state"), "rollback:" + variant.name, orjson.dumps(record)
        )

    async def set_weight(self, router: ModelRouter, variant: str, weight: float, by: str) -> None:
        target = router.variant(variant)  # an unknown variant is refused before Redis is asked
        at = self._clock.wall()
        record = {"weight": weight, "at": at, "by": by}
        try:
            async with self._redis.pipeline(transaction=True) as pipe:
                pipe.hdel(self._key(router, "state"), "rollback:" + variant)
                pipe.hset(self._key(router, "state"), "weight:" + variant, orjson.dumps(record))
                pipe.delete(self._key(router, "samples:" + variant))
                await pipe.execute()
        except (RedisError, OSError) as err:
            raise RoutingStateUnavailable(
                f"The shared routing state could not be written ({type(err).__name__}); "
                "nothing was changed. Try again."
            ) from None
        target.weight_event_at = at
        target.unsent.clear()
        if apply_weight(router, variant, weight, by, self.metrics):
            self.metrics.reenables.labels(router.name, variant).inc()

    def _failed(self, err: BaseException) -> None:
        if not self._failing:
            self._failing = True
            logger.warning(
                "canary state store unreachable; judging paused, serving on what is known",
                extra={"fields": {"error": f"{type(err).__name__}: {err}"}},
            )

    def _recovered(self) -> None:
        if self._failing:
            self._failing = False
            logger.warning("canary state store reachable again")


def _text(value: bytes | str) -> str:
    return value if isinstance(value, str) else value.decode()


def _parse(member: bytes) -> tuple[bool, float | None]:
    _, _, error, ttft = member.split(b"|")
    return error == b"1", float(ttft) if ttft else None
