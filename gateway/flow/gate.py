"""The pipeline's side of flow control: a request's band, and its wait for a pool with room.

The handler asks once per admitted request, after the route is planned and before dispatch::

    waited = gate.start(principal, headers)               # its band (key, tenant, header)
    waited = await gate.wait(waited, plan, request, prompt)
    waited.seconds, waited.band, waited.refused           # for the outcome, however it ended
    waited.load                                           # the snapshot it passed on

The room check reads one frozen snapshot of the load book (gateway/routing/load.py), which also
counts each tenant's places (requests holding a replica): with ``flow.reserve``, the tenant
holding the most (ties: each of them) may not take the reserved places and starts of a pool, so
another tenant's request finds one free at once. The queue is pumped by the book's subscribers
(``create_app``: whenever a place frees).

``wait`` returns at once, without a suspension, while some pool of the plan has headroom and
nobody waits; else the request queues (gateway/flow/queue.py). A pool with no healthy replica
never makes a request wait: dispatch answers that at once (503 ``no_healthy_upstream``).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Mapping
from typing import Any

from gateway.asgi import Headers, find_header
from gateway.auth.models import Principal
from gateway.errors import GatewayError, QueueRefused
from gateway.flow.bands import PRIORITY_HEADER, band_of
from gateway.flow.config import FlowConfig
from gateway.flow.metrics import FlowMetrics
from gateway.flow.queue import NO_POOL, FlowQueue, Ticket
from gateway.routing.load import LoadSnapshot, LocalLoadBook
from gateway.routing.pools import Pool
from gateway.routing.router import RoutePlan
from gateway.tokens.counting import PromptTokens
from gateway.wire.request import ParsedRequest


class Waited:
    """How one request fared at the gate; filled in as it goes (it may end in an error)."""

    __slots__ = ("band", "load", "refused", "seconds", "tenant")

    def __init__(self, band: str, tenant: str) -> None:
        self.band = band
        self.tenant = tenant
        self.seconds = 0.0
        self.refused = False
        """Flow control refused it (shed, queue full, wait over): nothing was sent upstream."""
        self.load: LoadSnapshot | None = None
        """The load book's snapshot it was let through on: dispatch's first choice reads it."""


class FlowGate:
    def __init__(
        self,
        config: FlowConfig,
        metrics: FlowMetrics | None = None,
        clock: Callable[[], float] = time.perf_counter,
    ) -> None:
        """``clock``: what the wait is measured on; a request's own timings are real time
        (``perf_counter``, like its arrival), not the app's injectable clock."""
        self.config = config
        self.metrics = metrics
        self._clock = clock
        self.queue = FlowQueue(config, clock, None if metrics is None else metrics.observe)
        reserve = config.reserve
        self._reserve = (reserve.places, reserve.starting)

    def start(self, principal: Principal | None, headers: Headers) -> Waited:
        """``headers``: the request's, for the priority it asks (bounded by its key's band)."""
        band = band_of(self.config, principal, find_header(headers, PRIORITY_HEADER))
        return Waited(band, "" if principal is None else principal.tenant_id)

    async def wait(
        self, waited: Waited, plan: RoutePlan, request: ParsedRequest, prompt: PromptTokens
    ) -> Waited:
        queue = self.queue
        room = RoomCheck(plan, waited.tenant, self._reserve)
        book = plan.preferred.book
        claims = book.claims
        found = room(queue.pending) if queue.waiting == 0 else None
        if found is not None and (
            not claims or await self._claim(book, plan, found, waited, request)
        ):
            waited.load = room.load
            return waited  # the common case: no ticket, no suspension (none locally)
        cost = prompt.count() + (request.max_tokens or 0)  # tokens, not requests (fairness)
        ticket = Ticket(waited.band, waited.tenant, cost, len(request.body))
        started = self._clock()
        try:
            while True:
                if claims:  # it waits on figures another gateway may have freed already
                    book.refresh()
                left = self.config.max_wait_seconds - (self._clock() - started)
                await queue.enter(ticket, room, queued=claims, max_wait=left)
                if not claims or await self._claim(book, plan, room.found, waited, request):
                    break
                self._check_wait(started)  # refused by another gateway's claim: wait again
                if room(queue.pending) is not None:  # its view should agree now; else no spin
                    await asyncio.sleep(self.config.recheck_seconds)
        except GatewayError:
            waited.refused = True
            raise
        finally:
            waited.seconds = self._clock() - started
        waited.load = room.load  # the snapshot its place was granted on
        return waited

    async def _claim(
        self, book: LocalLoadBook, plan: RoutePlan, pool: str, waited: Waited, request: Any
    ) -> bool:
        """Where gateway replicas share the places (the Redis book), the one the room check
        found is claimed across all of them at once, so two gateways never take the last."""
        target = next((p for p in _plan_pools(plan) if p.name == pool), None)
        if target is None:  # NO_POOL: no healthy pool, dispatch answers it at once
            return True
        return await book.claim(
            target,
            tenant=waited.tenant,
            starting=bool(request.stream),
            prompt_tokens=plan.prompt_tokens,
            reserve=self._reserve,
        )

    def _check_wait(self, started: float) -> None:
        if self._clock() - started >= self.config.max_wait_seconds:
            raise QueueRefused(
                f"No capacity freed within {self.config.max_wait_seconds:g}s; retry later.",
                code="queue_timeout",
                headers={"retry-after": str(self.config.retry_after_seconds)},
            )

    def publish(self) -> None:
        """Refresh the depth gauges (when /metrics is read)."""
        if self.metrics is None:
            return
        for band in self.queue.band_names:
            self.metrics.depth.labels(band).set(self.queue.depth(band))
        self.metrics.queued_bytes.set(self.queue.bytes)

    def show(self) -> dict[str, object]:
        """The queue as the admin API (and the console's routing page) shows it."""
        queue = self.queue
        return {
            "enabled": True,
            "waiting": queue.waiting,
            "bytes": queue.bytes,
            "max_queued": self.config.max_queued,
            "max_wait_seconds": self.config.max_wait_seconds,
            "bands": [
                {"name": b.name, "sheddable": b.sheddable, "waiting": queue.depth(b.name)}
                for b in self.config.bands
            ],
        }


class RoomCheck:
    """The first healthy pool of the plan (or its fallback's) with headroom on a fresh snapshot
    of the load book, counting the requests granted on it and not resumed
    (``pending[pool.name]``), less what flow control's reserve keeps from the tenant holding the
    most; ``NO_POOL`` when none is healthy at all (then dispatch refuses it at once: nothing to
    wait for); None: no room. The snapshot that found room is kept (``load``): dispatch's first
    choice reads it, so a granted request finds the pool the gate found room in (dispatch sees
    the plain bounds, looser than any held back)."""

    __slots__ = ("_matches", "_pools", "_reserve", "_tenant", "found", "load")

    def __init__(self, plan: RoutePlan, tenant: str = "", reserve: tuple[int, int] = (0, 0)):
        self._pools = _plan_pools(plan)
        self._tenant = tenant
        self._reserve = reserve
        self._matches = plan.matches
        self.load: LoadSnapshot | None = None
        self.found = NO_POOL
        """The pool the last room found was in (``NO_POOL``: none healthy)."""

    def __call__(self, pending: Mapping[str, int]) -> str | None:
        healthy = [pool for pool in self._pools if pool.healthy]
        if not healthy:
            self.found = NO_POOL
            return NO_POOL
        snapshot = healthy[0].book.snapshot(self._pools, tenant=self._tenant, matches=self._matches)
        kept = snapshot.held_back(self._reserve)
        for pool in healthy:
            load = snapshot.pool(pool.name)
            if load.saturation(pool.config, pending.get(pool.name, 0), kept) is None:
                self.load = snapshot
                self.found = pool.name
                return pool.name
        return None


def _plan_pools(plan: RoutePlan) -> list[Pool]:
    pools = [pool for pool, _ in plan.pools]
    if plan.fallback is not None:
        pools.extend(pool for pool, _ in plan.fallback.pools)
    return pools


def room_in(plan: RoutePlan, tenant: str = "", reserve: tuple[int, int] = (0, 0)) -> RoomCheck:
    """The plan's room check (:class:`RoomCheck`)."""
    return RoomCheck(plan, tenant, reserve)
