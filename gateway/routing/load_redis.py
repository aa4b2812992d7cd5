"""The load book shared by every gateway replica through one Redis (``load_sharing``).

:class:`RedisLoadBook` is the local book (gateway/routing/load.py) plus the other replicas'
figures: in flight, starting and prompt tokens per pool and replica, places held per tenant (flow
control's reserve), and prefix hints (a prompt's block names, blake2b, and the replica they were
sent to). Every replica writes its own figures as one entry, ``at json``, in the hash
``{PREFIX}:load`` (one hash tag: Redis Cluster keeps the keys in one slot), stamped with Redis's
own clock, and reads back the others' in the same script call; entries older than ``max_age``
are dropped, so a replica that died stops counting within it. Hints go to the stream
``{PREFIX}:hints`` (capped at ``max_hints`` entries) and each replica reads what the others added
since its last read, in the same round trip::

    book = RedisLoadBook.from_config(config.load_sharing)
    await book.start()                      # the exchange task
    book.take(...); book.give_back(hold)    # as the local book; each change wakes the exchange
    await book.aclose()

When it exchanges: as soon as a figure changed (a take, a first token, a give-back), one exchange
at a time (changes meanwhile are coalesced into the next), and every ``interval`` seconds while
nothing changes (to stay fresh). So another replica's view lags by about one round trip under
load, not by the interval (README, issue 35: why not an atomic script per take).

Requests never wait on Redis: an unreachable Redis leaves each replica its own view (the others'
figures back to zero), logged once, never an error.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import uuid
from collections import deque
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

import orjson
import redis.asyncio as aioredis
from redis.exceptions import RedisError

from gateway.routing.load import LocalLoadBook, Others
from gateway.routing.load_config import LoadSharingConfig
from gateway.routing.prefix import PromptBlocks

if TYPE_CHECKING:
    from gateway.routing.pools import Pool

logger = logging.getLogger(__name__)

EXCHANGE = """
local t = redis.call('TIME')
local now = tonumber(t[1]) + tonumber(t[2]) / 1000000
local me = ARGV[1]
local max_age = tonumber(ARGV[2])
redis.call('HSET', KEYS[1], me, tostring(now) .. ' ' .. ARGV[3])
redis.call('PEXPIRE', KEYS[1], math.ceil(max_age * 1000) + 1000)
local all = redis.call('HGETALL', KEYS[1])
local out = {}
for i = 1, #all, 2 do
  if all[i] ~= me then
    local space = string.find(all[i + 1], ' ', 1, true)
    local at = space and tonumber(string.sub(all[i + 1], 1, space - 1))
    if at and now - at <= max_age then
      out[#out + 1] = string.sub(all[i + 1], space + 1)
    else
      redis.call('HDEL', KEYS[1], all[i])
    end
  end
end
return out
"""

CLAIM = """
local t = redis.call('TIME')
local now = tonumber(t[1]) + tonumber(t[2]) / 1000000
local me, max_age, pool, tenant = ARGV[1], tonumber(ARGV[2]), ARGV[3], ARGV[4]
local capacity, max_starting = tonumber(ARGV[5]), tonumber(ARGV[6])
local keep_places, keep_starts = tonumber(ARGV[7]), tonumber(ARGV[8])
local in_flight, starting, held, others = 0, 0, {}, {}
local function count(blob)
  local found = cjson.decode(blob)
  local figures = found['p'][pool]
  if figures then
    starting = starting + figures[1]
    for _, r in pairs(figures[2]) do in_flight = in_flight + r[1] end
  end
  for name, n in pairs(found['t']) do held[name] = (held[name] or 0) + n end
end
local all = redis.call('HGETALL', KEYS[1])
for i = 1, #all, 2 do
  if all[i] ~= me then
    local space = string.find(all[i + 1], ' ', 1, true)
    local at = space and tonumber(string.sub(all[i + 1], 1, space - 1))
    if at and now - at <= max_age then
      local blob = string.sub(all[i + 1], space + 1)
      others[#others + 1] = blob
      count(blob)
    else
      redis.call('HDEL', KEYS[1], all[i])
    end
  end
end
count(ARGV[9])
local mine, most = held[tenant] or 0, 0
for _, n in pairs(held) do if n > most then most = n end end
if not (mine > 0 and mine >= most) then keep_places, keep_starts = 0, 0 end
local ok = (capacity < 0 or in_flight + keep_places < capacity)
  and (max_starting < 0 or starting + keep_starts < max_starting)
redis.call('HSET', KEYS[1], me, tostring(now) .. ' ' .. (ok and ARGV[10] or ARGV[9]))
redis.call('PEXPIRE', KEYS[1], math.ceil(max_age * 1000) + 1000)
return {ok and 1 or 0, others}
"""
"""A place claimed atomically: every gateway's fresh figures summed (this one's as it sends them,
``ARGV[9]``), the tenant's places against the most any tenant holds (flow control's reserve),
and the pool's ``capacity`` and ``max_starting`` checked; granted, this gateway's entry counts the
request at once (``ARGV[10]``), so no other gateway can take the same place. Also returns the
others' entries, which refresh this gateway's view (a refused claim then agrees with its own
room check)."""

MAX_HINT_BLOCKS = 512
"""Block names of one hint kept at most (a prompt's are bounded by its model's
``prefix.max_prompt_blocks``; this bounds what is read from another replica)."""


class RedisLoadBook(LocalLoadBook):
    """See the module docstring."""

    def __init__(
        self,
        redis: aioredis.Redis,
        config: LoadSharingConfig,
        clock: Callable[[], float] = time.monotonic,
        *,
        replica_id: str | None = None,
    ) -> None:
        super().__init__(clock)
        self.redis = redis
        self.config = config
        self.replica_id = replica_id or uuid.uuid4().hex[:12]
        self._key = f"{{{config.key_prefix}}}:load"
        self._hints_key = f"{{{config.key_prefix}}}:hints"
        self._outbox: deque[tuple[str, str, tuple[int, ...]]] = deque(maxlen=config.max_hints)
        self._last_hint = "0-0"
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._failing = False
        self._lock = asyncio.Lock()
        """One exchange or claim at a time: each writes this gateway's whole entry, so one sent
        while another is in flight could overwrite a claim with figures from before it."""
        self.exchanges = 0
        """Exchanges made (a test waits on it)."""

    @classmethod
    def from_config(
        cls, config: LoadSharingConfig, clock: Callable[[], float] = time.monotonic
    ) -> RedisLoadBook:
        """The book on ``load_sharing``'s one client (the canary judge, if any, shares it): a
        few connections (one exchange at a time, the canary's sync beside it)."""
        assert config.redis_url is not None  # the config validator requires it
        client = aioredis.Redis.from_url(
            config.redis_url,
            socket_timeout=config.timeout_seconds,
            socket_connect_timeout=config.timeout_seconds,
            max_connections=4,
        )
        return cls(client, config, clock)

    @property
    def stable_hashes(self) -> bool:
        return True  # the hints name blocks the same way in every process

    async def start(self) -> None:
        if self._task is None:
            self._task = asyncio.create_task(self._run())

    async def aclose(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        await self.redis.aclose()

    def _changed(self) -> None:
        self._wake.set()  # the exchange task sends it as soon as the one in flight is done

    def refresh(self) -> None:
        self._wake.set()  # a request waits on these figures: read the others' now

    def _recorded(self, pool: str, label: str, blocks: PromptBlocks) -> None:
        if self.config.max_hints:
            self._outbox.append((pool, label, blocks.hashes[:MAX_HINT_BLOCKS]))

    async def _run(self) -> None:
        interval = self.config.interval_seconds
        while True:
            self._wake.clear()  # what changes from here on is in the next exchange
            try:
                await self.exchange()
            except Exception:  # a bug must not end the sharing: logged, the own view stands
                logger.exception("shared load exchange failed")
                self._lost(RuntimeError("exchange failed"))
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(interval):
                    await self._wake.wait()

    @property
    def claims(self) -> bool:
        return True

    async def claim(
        self,
        pool: Pool,
        *,
        tenant: str,
        starting: bool,
        prompt_tokens: int,
        reserve: tuple[int, int],
    ) -> bool:
        """Take a place on ``pool`` for one request atomically across every gateway (the
        bounding figures: ``capacity``, ``max_starting``, the reserve held back from the tenant
        holding the most), before the request takes its replica in the same step. One round
        trip, at most ``timeout_seconds``; Redis away or slow: True, the gateway's own room
        check (already passed) decides, as without sharing."""
        config = pool.config
        bounds = (
            -1 if config.capacity is None else config.capacity,
            -1 if config.saturation.max_starting is None else config.saturation.max_starting,
        )
        if bounds == (-1, -1):
            return True  # nothing to bound exactly: the periodic figures are enough
        async with self._lock:
            without = self._mine()
            claimed = self._mine((pool.name, tenant, starting, prompt_tokens))
            try:
                async with asyncio.timeout(self.config.timeout_seconds):
                    granted, others = await self.redis.eval(
                        CLAIM, 1, self._key, self.replica_id, self.config.max_age_seconds,
                        pool.name, tenant, *bounds, *reserve, without, claimed,
                    )  # fmt: skip
            except (RedisError, OSError, TimeoutError) as err:
                self._lost(err)
                return True
            self._recovered()
            self._read_others(others)
            return bool(granted)

    async def exchange(self) -> None:
        """Send this replica's figures and hints; read the others' (one round trip)."""
        async with self._lock:
            await self._exchange()

    async def _exchange(self) -> None:
        hints = list(self._outbox)
        self._outbox.clear()
        pipe = self.redis.pipeline(transaction=False)
        # EVAL, not EVALSHA: a pipeline would ask SCRIPT EXISTS first, a second round trip.
        mine = self._mine()
        pipe.eval(EXCHANGE, 1, self._key, self.replica_id, self.config.max_age_seconds, mine)
        for pool, label, names in hints:
            entry: dict[Any, Any] = {
                "g": self.replica_id,
                "p": pool,
                "r": label,
                "h": _names(names),
            }
            pipe.xadd(self._hints_key, entry, maxlen=self.config.max_hints, approximate=True)
        if self.config.max_hints:
            pipe.xread({self._hints_key: self._last_hint}, count=self.config.max_hints)
        try:
            async with asyncio.timeout(self.config.timeout_seconds):
                results = await pipe.execute()
        except (RedisError, OSError, TimeoutError) as err:
            self._lost(err)
            return
        self._recovered()
        self.exchanges += 1
        self._read_others(results[0])
        if self.config.max_hints:
            self._read_hints(results[-1])

    def _mine(self, claim: tuple[str, str, bool, int] | None = None) -> bytes:
        """This gateway's entry; ``claim`` (pool, tenant, starting, prompt tokens): with one
        request more, not on a replica yet (counted under the label ``""``)."""
        pools: dict[str, Any] = {}
        for name, book in self._pools.items():
            replicas: dict[str, Any] = {
                label: (c.outstanding, c.prompt_tokens)
                for label, c in book.replicas.items()
                if c.outstanding
            }
            pools[name] = [book.starting, replicas]
        held: Mapping[str, int] = self._held
        if claim is not None:
            name, tenant, starting, tokens = claim
            figures = pools.setdefault(name, [0, {}])
            figures[0] += starting
            figures[1][""] = (1, tokens)
            held = {**held, tenant: held.get(tenant, 0) + 1}
        # A Lua table decoded from an empty JSON object is an empty array: both read the same.
        return orjson.dumps({"p": pools, "t": held})

    def _read_others(self, blobs: list[bytes]) -> None:
        sums: dict[str, Others] = {}
        held: dict[str, int] = {}
        for blob in blobs:
            try:
                found = orjson.loads(blob)
                pools, tenants = found["p"], found["t"]
                for name, (starting, replicas) in pools.items():
                    others = sums.setdefault(name, Others(replicas={}))
                    others.starting += int(starting)
                    for label, (out, tokens) in replicas.items():
                        was = others.replicas.get(label, (0, 0))
                        others.replicas[label] = (was[0] + int(out), was[1] + int(tokens))
                        others.in_flight += int(out)
                        others.prompt_tokens += int(tokens)
                for tenant, count in tenants.items():
                    held[tenant] = held.get(tenant, 0) + int(count)
            except (ValueError, KeyError, TypeError):  # another version's entry: not counted
                continue
        freed = any(held.get(t, 0) < n for t, n in self.others_held.items())
        for name, book in self._pools.items():
            others = sums.get(name, Others())
            if others.in_flight < book.others.in_flight or others.starting < book.others.starting:
                freed = True
            book.others = others
        self.others_held = held
        own = self._held
        self.others_most = max((n + own.get(t, 0) for t, n in held.items()), default=0)
        if freed:  # a place freed on another gateway: this one's queue may grant it now
            self._tell()

    def _read_hints(self, found: Any) -> None:
        for _stream, entries in found or ():
            for entry_id, fields in entries:
                self._last_hint = _text(entry_id)
                if _text(fields.get(b"g", b"")) == self.replica_id:
                    continue
                book = self._pools.get(_text(fields.get(b"p", b"")))
                if book is None or book.prefix is None:
                    continue
                index = book.index_of.get(_text(fields.get(b"r", b"")))
                names = _parse_names(fields.get(b"h", b""))
                if index is not None and names:
                    book.prefix.record(PromptBlocks(names, 0, 1), index)

    def _recovered(self) -> None:
        if self._failing:
            logger.info("shared load back")
        self._failing = False

    def _lost(self, err: BaseException) -> None:
        if not self._failing:
            logger.warning("shared load unavailable", extra={"fields": {"error": repr(err)}})
        self._failing = True
        for book in self._pools.values():
            book.others = Others()  # the gateway's own view alone
        self.others_held = {}
        self.others_most = 0


def _names(names: tuple[int, ...]) -> str:
    return ",".join(map(str, names))


def _parse_names(raw: bytes) -> tuple[int, ...]:
    try:
        return tuple(int(n) for n in raw.split(b",")[:MAX_HINT_BLOCKS] if n)
    except ValueError:
        return ()


def _text(raw: bytes | str) -> str:
    return raw.decode() if isinstance(raw, bytes) else raw
