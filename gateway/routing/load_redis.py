"""The gateway's own load view, shared by every gateway replica through the rate limits' Redis.

Each replica sends its requests and prompt tokens in flight per pool every ``interval`` seconds,
and reads back the sum of the other replicas' (``pool.others``), in one script call for all
pools. A replica's entry is ``in_flight tokens at`` in the hash ``{PREFIX:load}:POOL`` (one hash
tag: Redis Cluster keeps them in one slot), stamped with Redis's own clock; entries older than
``max_age`` are dropped and not counted, so a replica that died stops counting within it::

    shared = SharedLoad(redis, prefix="gw")
    await shared.exchange(pools)            # pool.others updated
    task = asyncio.create_task(shared.run(lambda: state.table.pools.values()))

Requests never wait on Redis: an unreachable Redis leaves each replica its own view
(``others`` back to zero), logged once, never an error.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Callable, Iterable
from typing import Any

import redis.asyncio as aioredis
from redis.exceptions import RedisError

from gateway.routing.pools import Pool

logger = logging.getLogger(__name__)

EXCHANGE = """
local t = redis.call('TIME')
local now = tonumber(t[1]) + tonumber(t[2]) / 1000000
local me = ARGV[1]
local max_age = tonumber(ARGV[2])
local out = {}
for k = 1, #KEYS do
  redis.call('HSET', KEYS[k], me, ARGV[2 + k] .. ' ' .. tostring(now))
  redis.call('PEXPIRE', KEYS[k], math.ceil(max_age * 1000) + 1000)
  local all = redis.call('HGETALL', KEYS[k])
  local n, tokens = 0, 0
  for i = 1, #all, 2 do
    if all[i] ~= me then
      local a, b, at = string.match(all[i + 1], '(%S+) (%S+) (%S+)')
      if at and now - tonumber(at) <= max_age then
        n = n + tonumber(a)
        tokens = tokens + tonumber(b)
      else
        redis.call('HDEL', KEYS[k], all[i])
      end
    end
  end
  out[k] = {n, tokens}
end
return out
"""


class SharedLoad:
    def __init__(
        self,
        redis: aioredis.Redis,
        *,
        prefix: str,
        interval: float = 0.5,
        max_age: float = 2.0,
        replica_id: str | None = None,
    ) -> None:
        self.redis = redis
        self.prefix = prefix
        self.interval = interval
        self.max_age = max_age
        self.replica_id = replica_id or uuid.uuid4().hex[:12]
        self._script: Any = redis.register_script(EXCHANGE)
        self._failing = False

    @classmethod
    def from_url(cls, url: str, *, prefix: str, timeout: float) -> SharedLoad:
        client = aioredis.Redis.from_url(url, socket_timeout=timeout, max_connections=2)
        return cls(client, prefix=prefix)

    async def exchange(self, pools: Iterable[Pool]) -> None:
        pools = list(pools)
        if not pools:
            return
        keys = [f"{{{self.prefix}:load}}:{pool.name}" for pool in pools]
        args = [self.replica_id, self.max_age]
        args += [f"{pool.in_flight} {pool.prompt_tokens}" for pool in pools]
        try:
            found = await self._script(keys=keys, args=args)
        except (RedisError, OSError) as err:
            if not self._failing:
                logger.warning("shared load unavailable", extra={"fields": {"error": str(err)}})
            self._failing = True
            for pool in pools:
                pool.others = (0, 0)  # the gateway's own view alone
            return
        self._failing = False
        for pool, (others, tokens) in zip(pools, found, strict=True):
            pool.others = (int(others), int(tokens))

    async def run(self, pools: Callable[[], Iterable[Pool]]) -> None:
        while True:
            await self.exchange(pools())
            await asyncio.sleep(self.interval)

    async def aclose(self) -> None:
        await self.redis.aclose()
