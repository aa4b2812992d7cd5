"""The flow-control queue: requests no pool has room for wait here, by band, fairly by tenant.

A request passes :meth:`FlowQueue.enter` after admission (it keeps its reservation while it
waits) and before dispatch. When nobody waits and ``has_room()`` says some pool of its plan has
headroom it goes on at once, without a suspension. Otherwise:

- a sheddable band is refused at once (:class:`~gateway.errors.Shed`, 429);
- it waits, bounded by count and bytes: past either, the newest waiter of the lowest band below
  it gives way, or it is refused itself (:class:`~gateway.errors.QueueRefused`, 503
  ``queue_full``); past ``max_wait_seconds`` it is refused (503 ``queue_timeout``), both with
  ``retry-after``;
- whenever a request leaves a pool (and every ``recheck_seconds`` while anyone waits, since the
  engines' gauges change too) the queue grants places: the highest band first; within a band
  the tenant whose next request has the smallest start tag (start-time fair queuing, each
  request costing its tokens: one tenant's long prompts cannot crowd another's short ones out),
  FIFO within a tenant::

    queue = FlowQueue(config, clock=time.monotonic)
    waited = await queue.enter(Ticket("standard", "tenant-a", cost=1200, size=4096), has_room)
    ...  # dispatch: the place is taken synchronously after ``enter`` returns

A granted request counts as ``pending`` on the pool its room was found in until it resumes, so one
pump never grants more places than that pool has, and a grant meant for one pool takes nothing
from another's headroom; it resumes and takes its replica in one synchronous step.
"""

from __future__ import annotations

import asyncio
import itertools
import time
from collections import Counter, deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from gateway.errors import QueueRefused, Shed
from gateway.flow.config import FlowConfig
from gateway.values import value

HasRoom = Callable[[Mapping[str, int]], str | None]
"""``has_room(pending)``: the name of a pool of the request's plan with headroom, counting
``pending[name]`` granted requests about to arrive on each; ``""`` when the request need not
wait for any pool (none is healthy: dispatch answers it at once); None: no room."""

NO_POOL = ""
"""What ``has_room`` names when the request goes on without a pool's place (nothing pending)."""

DISPATCHED = "dispatched"
TIMEOUT = "timeout"
SHED = "shed"
FULL = "full"
EVICTED = "evicted"
GONE = "gone"
RESULTS = (DISPATCHED, TIMEOUT, SHED, FULL, EVICTED, GONE)


@value
class Ticket:
    """One request's claim on a place: its band, tenant, cost in tokens, body size."""

    band: str
    tenant: str
    cost: int
    size: int


@dataclass(eq=False, slots=True)
class _Waiter:
    ticket: Ticket
    has_room: HasRoom
    start: float
    """Its start tag within the band (start-time fair queuing)."""
    seq: int
    future: asyncio.Future[None]
    evicted: bool = False
    granted: str = NO_POOL
    """The pool its place was granted in (counted in ``pending`` until it resumes)."""


@dataclass(eq=False, slots=True)
class _Band:
    rank: int
    sheddable: bool
    vtime: float = 0.0
    tenants: dict[str, deque[_Waiter]] = field(default_factory=dict)
    finish: dict[str, float] = field(default_factory=dict)
    """Each tenant's last finish tag, kept while it is ahead of the band's virtual time."""
    waiting: int = 0


class FlowQueue:
    """Bounded, banded, fair; see the module docstring."""

    def __init__(
        self,
        config: FlowConfig,
        clock: Callable[[], float] = time.monotonic,
        observe: Callable[[str, str, float], None] | None = None,
    ) -> None:
        self.config = config
        self._clock = clock
        self._observe = observe
        """``observe(band, result, waited)`` for each request that had to wait or was refused."""
        self._bands = {b.name: _Band(rank, b.sheddable) for rank, b in enumerate(config.bands)}
        self._seq = itertools.count()
        self.waiting = 0
        self.bytes = 0
        self.pending: Counter[str] = Counter()
        """Granted requests not resumed yet, per pool name."""
        self._recheck: asyncio.TimerHandle | None = None

    def depth(self, band: str) -> int:
        return self._bands[band].waiting

    @property
    def band_names(self) -> list[str]:
        return list(self._bands)

    async def enter(
        self,
        ticket: Ticket,
        has_room: HasRoom,
        *,
        queued: bool = False,
        max_wait: float | None = None,
    ) -> float:
        """Seconds waited (0.0 when it went straight on); raises Shed or QueueRefused.
        ``queued``: no straight way on, even with room (flow control's gate already tried it:
        its claim was refused). ``max_wait``: what is left of the request's wait (default
        ``max_wait_seconds``: a request that queues again after a refused claim waits no
        longer in all)."""
        limit = self.config.max_wait_seconds if max_wait is None else max_wait
        if not queued and self.waiting == 0 and has_room(self.pending) is not None:
            return 0.0
        band = self._bands[ticket.band]
        if band.sheddable:
            self._note(ticket.band, SHED, 0.0)
            raise Shed(
                "The servers are at capacity and this request's priority is sheddable; "
                "retry later.",
                headers=self._retry_after(),
            )
        self._make_room(ticket)
        started = self._clock()
        waiter = self._push(band, ticket, has_room)
        self.pump()
        try:
            async with asyncio.timeout(limit):
                await asyncio.shield(waiter.future)
        except TimeoutError:
            if not waiter.future.done():
                self._remove(band, waiter)
                self._note(ticket.band, TIMEOUT, self._clock() - started)
                raise QueueRefused(
                    f"No capacity freed within {self.config.max_wait_seconds:g}s; retry later.",
                    code="queue_timeout",
                    headers=self._retry_after(),
                ) from None
            # granted at the deadline itself: it goes on
        except asyncio.CancelledError:  # the client left (or a shutdown) while waiting
            if waiter.future.done() and not waiter.evicted:
                self._resumed(waiter)  # granted but never resumed
                self.pump()
            elif not waiter.future.done():
                self._remove(band, waiter)
            self._note(ticket.band, GONE, self._clock() - started)
            raise
        waited = self._clock() - started
        if waiter.evicted:
            self._note(ticket.band, EVICTED, waited)
            raise QueueRefused(
                "The queue is full of requests of higher priority; retry later.",
                headers=self._retry_after(),
            )
        self._resumed(waiter)  # it takes its replica now, in this same step
        self._note(ticket.band, DISPATCHED, waited)
        return waited

    def pump(self) -> None:
        """Grant places while a waiter of the highest band waiting has room: its tenants'
        heads in order of start tag, the first whose plan has room (another tenant's head may
        have room where the best one's has none: its plan's pools differ, or flow control's
        reserve keeps places from the best one's tenant)."""
        while self.waiting:
            found = self._next_with_room()
            if found is None:
                break
            waiter, pool = found
            band = self._bands[waiter.ticket.band]
            band.vtime = max(band.vtime, waiter.start)
            self._remove(band, waiter)
            waiter.granted = pool
            if pool:
                self.pending[pool] += 1
            waiter.future.set_result(None)
        self._schedule_recheck()

    def _resumed(self, waiter: _Waiter) -> None:
        pool = waiter.granted
        if pool:
            left = self.pending[pool] - 1
            if left:
                self.pending[pool] = left
            else:
                del self.pending[pool]  # only pools with grants outstanding: bounded

    def _next_with_room(self) -> tuple[_Waiter, str] | None:
        for band in self._bands.values():
            if band.waiting:
                heads = sorted(
                    (queue[0] for queue in band.tenants.values()), key=lambda w: (w.start, w.seq)
                )
                for waiter in heads:
                    pool = waiter.has_room(self.pending)
                    if pool is not None:
                        return waiter, pool
                return None
        return None

    def _push(self, band: _Band, ticket: Ticket, has_room: HasRoom) -> _Waiter:
        start = max(band.vtime, band.finish.get(ticket.tenant, 0.0))
        band.finish[ticket.tenant] = start + max(1, ticket.cost)
        loop = asyncio.get_running_loop()
        waiter = _Waiter(ticket, has_room, start, next(self._seq), loop.create_future())
        band.tenants.setdefault(ticket.tenant, deque()).append(waiter)
        band.waiting += 1
        self.waiting += 1
        self.bytes += ticket.size
        return waiter

    def _remove(self, band: _Band, waiter: _Waiter) -> None:
        tenant = waiter.ticket.tenant
        queue = band.tenants[tenant]
        queue.remove(waiter)
        if not queue:
            del band.tenants[tenant]
        band.waiting -= 1
        self.waiting -= 1
        self.bytes -= waiter.ticket.size
        # Finish tags behind the band's virtual time say nothing any more: drop them (bounded).
        if len(band.finish) > len(band.tenants):
            band.finish = {
                t: f for t, f in band.finish.items() if f > band.vtime or t in band.tenants
            }

    def _make_room(self, ticket: Ticket) -> None:
        """Within the bounds, or the newest waiter of the lowest band below gives way."""
        config = self.config
        rank = self._bands[ticket.band].rank
        while (
            self.waiting + 1 > config.max_queued
            or self.bytes + ticket.size > config.max_queued_bytes
        ):
            victim = self._lowest_below(rank)
            if victim is None:
                self._note(ticket.band, FULL, 0.0)
                raise QueueRefused(
                    "The servers are at capacity and the gateway's queue is full; retry later.",
                    headers=self._retry_after(),
                )
            band = self._bands[victim.ticket.band]
            self._remove(band, victim)
            victim.evicted = True
            victim.future.set_result(None)

    def _lowest_below(self, rank: int) -> _Waiter | None:
        for band in reversed(self._bands.values()):
            if band.rank <= rank:
                return None
            if band.waiting:
                return max(
                    (w for queue in band.tenants.values() for w in queue), key=lambda w: w.seq
                )
        return None

    def _schedule_recheck(self) -> None:
        if self.waiting and self._recheck is None:
            loop = asyncio.get_running_loop()
            self._recheck = loop.call_later(self.config.recheck_seconds, self._rechecked)

    def _rechecked(self) -> None:
        self._recheck = None
        self.pump()

    def close(self) -> None:
        if self._recheck is not None:
            self._recheck.cancel()
            self._recheck = None

    def _retry_after(self) -> dict[str, str]:
        return {"retry-after": str(self.config.retry_after_seconds)}

    def _note(self, band: str, result: str, waited: float) -> None:
        if self._observe is not None:
            self._observe(band, result, waited)
