"""The pipeline's side of flow control: a request's band, and its wait for a pool with room.

The handler asks once per admitted request, after the route is planned and before dispatch::

    waited = gate.start(principal, headers)               # its band (key, tenant, header)
    waited = await gate.wait(waited, plan, request, prompt)
    waited.seconds, waited.band, waited.refused           # for the outcome, however it ended
    gate.done(waited)                                     # the exchange ended, however

The gate counts each tenant's requests past it until ``done``: with ``flow.reserve``, the tenant
holding the most (ties: each of them) may not take the reserved places and starts of a pool, so
another tenant's request finds one free at once.

``wait`` returns at once, without a suspension, while some pool of the plan has headroom and
nobody waits; else the request queues (gateway/flow/queue.py). A pool with no healthy replica
never makes a request wait: dispatch answers that at once (503 ``no_healthy_upstream``).
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable, Mapping

from gateway.asgi import Headers, find_header
from gateway.auth.models import Principal
from gateway.errors import GatewayError
from gateway.flow.bands import PRIORITY_HEADER, band_of
from gateway.flow.config import FlowConfig
from gateway.flow.metrics import FlowMetrics
from gateway.flow.queue import NO_POOL, FlowQueue, HasRoom, Ticket
from gateway.routing.pools import Pool
from gateway.routing.router import RoutePlan
from gateway.tokens.counting import PromptTokens
from gateway.wire.request import ParsedRequest


class Waited:
    """How one request fared at the gate; filled in as it goes (it may end in an error)."""

    __slots__ = ("band", "passed", "refused", "seconds", "tenant")

    def __init__(self, band: str, tenant: str) -> None:
        self.band = band
        self.tenant = tenant
        self.seconds = 0.0
        self.refused = False
        """Flow control refused it (shed, queue full, wait over): nothing was sent upstream."""
        self.passed = False
        """It went on to dispatch: counted as its tenant's until :meth:`FlowGate.done`."""


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
        self.held: dict[str, int] = {}
        """Requests past the gate per tenant, until their exchange ended (only tenants with
        some: bounded by the requests in flight)."""
        self._holding: Counter[int] = Counter()
        """How many tenants hold each count, so the most held is known without a scan."""
        self.most = 0
        """The most requests one tenant holds."""

    def start(self, principal: Principal | None, headers: Headers) -> Waited:
        """``headers``: the request's, for the priority it asks (bounded by its key's band)."""
        band = band_of(self.config, principal, find_header(headers, PRIORITY_HEADER))
        return Waited(band, "" if principal is None else principal.tenant_id)

    async def wait(
        self, waited: Waited, plan: RoutePlan, request: ParsedRequest, prompt: PromptTokens
    ) -> Waited:
        queue = self.queue
        has_room = room_in(plan, self._held_back(waited.tenant))
        if queue.waiting == 0 and has_room(queue.pending) is not None:
            self._pass(waited)
            return waited  # the common case: no ticket, no suspension
        cost = prompt.count() + (request.max_tokens or 0)  # tokens, not requests (fairness)
        ticket = Ticket(waited.band, waited.tenant, cost, len(request.body))
        started = self._clock()
        try:
            await queue.enter(ticket, has_room)
        except GatewayError:
            waited.refused = True
            raise
        finally:
            waited.seconds = self._clock() - started
        self._pass(waited)
        return waited

    def done(self, waited: Waited) -> None:
        """The request's exchange ended (any way): its tenant holds one place less."""
        if not waited.passed:
            return
        waited.passed = False
        held, holding = self.held, self._holding
        had = held[waited.tenant]
        holding[had] -= 1
        if not holding[had]:
            del holding[had]
            if had == self.most:  # it held the most alone: now it, at had - 1, does
                self.most = had - 1
        if had > 1:
            held[waited.tenant] = had - 1
            holding[had - 1] += 1
        else:
            del held[waited.tenant]
        if self.config.reserve.places or self.config.reserve.starting:
            self.queue.pump()  # who holds the most may have changed

    def _pass(self, waited: Waited) -> None:
        waited.passed = True
        held, holding = self.held, self._holding
        had = held.get(waited.tenant, 0)
        if had:
            holding[had] -= 1
            if not holding[had]:
                del holding[had]
        held[waited.tenant] = had + 1
        holding[had + 1] += 1
        self.most = max(self.most, had + 1)

    def _held_back(self, tenant: str) -> Callable[[], tuple[int, int]]:
        """What the tenant's request may not use of each pool, asked whenever its room is."""
        reserve = self.config.reserve
        kept = (reserve.places, reserve.starting)
        if kept == (0, 0):
            return _NOTHING_HELD_BACK
        held = self.held

        def held_back() -> tuple[int, int]:
            mine = held.get(tenant, 0)
            return kept if mine and mine >= self.most else (0, 0)

        return held_back

    def watch(self, pool: Pool) -> None:
        pool.on_release = self.queue.pump

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


def _nothing_held_back() -> tuple[int, int]:
    return (0, 0)


_NOTHING_HELD_BACK = _nothing_held_back


def room_in(
    plan: RoutePlan, held_back: Callable[[], tuple[int, int]] = _NOTHING_HELD_BACK
) -> HasRoom:
    """The first healthy pool of the plan (or its fallback's) with headroom, counting the
    requests granted on it and not resumed (``pending[pool.name]``), less what ``held_back()``
    keeps from this request; ``NO_POOL`` when none is healthy at all (then dispatch refuses it at
    once: nothing to wait for); None: no room. Dispatch itself sees the plain bounds, looser than
    any held back, so a granted request always finds the pool the gate found room in."""
    pools = [pool for pool, _ in plan.pools]
    if plan.fallback is not None:
        pools.extend(pool for pool, _ in plan.fallback.pools)

    def has_room(pending: Mapping[str, int]) -> str | None:
        healthy = [pool for pool in pools if pool.healthy]
        if not healthy:
            return NO_POOL
        kept = held_back()
        for pool in healthy:
            if pool.saturation(pending.get(pool.name, 0), kept) is None:
                return pool.name
        return None

    return has_room
