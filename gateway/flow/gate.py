"""The pipeline's side of flow control: a request's band, and its wait for a pool with room.

The handler asks once per admitted request, after the route is planned and before dispatch::

    waited = gate.start(scope)                            # its band (key, tenant, header)
    waited = await gate.wait(waited, plan, request, prompt)
    waited.seconds, waited.band, waited.refused           # for the outcome, however it ended

``wait`` returns at once, without a suspension, while some pool of the plan has headroom and
nobody waits; else the request queues (gateway/flow/queue.py). A pool with no healthy replica
never makes a request wait: dispatch answers that at once (503 ``no_healthy_upstream``).
"""

from __future__ import annotations

import time
from collections.abc import Callable

from gateway.asgi import Scope, header
from gateway.errors import GatewayError
from gateway.flow.bands import PRIORITY_HEADER, band_of
from gateway.flow.config import FlowConfig
from gateway.flow.metrics import FlowMetrics
from gateway.flow.queue import FlowQueue, HasRoom, Ticket
from gateway.routing.pools import Pool
from gateway.routing.router import RoutePlan
from gateway.tokens.counting import PromptTokens
from gateway.wire.outcome import PRINCIPAL_KEY
from gateway.wire.request import ParsedRequest


class Waited:
    """How one request fared at the gate; filled in as it goes (it may end in an error)."""

    __slots__ = ("band", "refused", "seconds", "tenant")

    def __init__(self, band: str, tenant: str) -> None:
        self.band = band
        self.tenant = tenant
        self.seconds = 0.0
        self.refused = False
        """Flow control refused it (shed, queue full, wait over): nothing was sent upstream."""


class FlowGate:
    def __init__(
        self,
        config: FlowConfig,
        metrics: FlowMetrics | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.config = config
        self.metrics = metrics
        self._clock = clock
        self.queue = FlowQueue(config, clock, None if metrics is None else metrics.observe)

    def start(self, scope: Scope) -> Waited:
        principal = scope.get(PRINCIPAL_KEY)
        band = band_of(self.config, principal, header(scope, PRIORITY_HEADER))
        return Waited(band, "" if principal is None else principal.tenant_id)

    async def wait(
        self, waited: Waited, plan: RoutePlan, request: ParsedRequest, prompt: PromptTokens
    ) -> Waited:
        queue = self.queue
        has_room = room_in(plan)
        if queue.waiting == 0 and has_room(queue.pending):
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
        return waited

    def pump(self) -> None:
        """A request left a pool: a waiting one may go."""
        self.queue.pump()

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


def room_in(plan: RoutePlan) -> HasRoom:
    """Some healthy pool of the plan (or its fallback's) has headroom with ``pending`` more;
    or none is healthy at all (then dispatch refuses it at once: nothing to wait for)."""
    pools = [pool for pool, _ in plan.pools]
    if plan.fallback is not None:
        pools.extend(pool for pool, _ in plan.fallback.pools)

    def has_room(pending: int) -> bool:
        healthy = [pool for pool in pools if pool.healthy]
        return not healthy or any(pool.saturation(pending) is None for pool in healthy)

    return has_room
