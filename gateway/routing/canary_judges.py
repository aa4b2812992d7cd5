"""One canary decision for the whole deployment: where the judge's samples and rollbacks live.

With the in-process limiter there is one replica, so each router judges its own window
(:class:`LocalCanaries`). With the Redis limiter backend, every replica pushes its outcomes to one
window per variant in Redis and judges that shared window; the rollback is one ``HSETNX``, so it is
decided once, and every replica reads the rollback state every ``SYNC_SECONDS`` (a quarter of a
second) and stops sending to the variant
(:class:`gateway.routing.canary_judges_redis.RedisCanaries`).
Re-enabling is an operator's act (``PUT /admin/routing/models/M/variants/V``), shared the same way,
logged and counted::

    canaries = LocalCanaries(metrics)        # or RedisCanaries(url, prefix=..., metrics=...)
    await canaries.start(lambda: routers)    # the routers of the current table, read each time
    await canaries.set_weight(router, "canary", 5.0, by="admin-key-id")
    await canaries.aclose()
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Protocol

from gateway.routing.metrics import RoutingMetrics
from gateway.routing.router import ModelRouter

Routers = Callable[[], Iterable[ModelRouter]]
"""The routers of the routing table in force (a reload swaps them: read it each time)."""


class Canaries(Protocol):
    shared: bool
    """True when the judgement is the deployment's (routers then do not judge on their own)."""

    async def start(self, routers: Routers) -> None: ...

    async def set_weight(self, router: ModelRouter, variant: str, weight: float, by: str) -> None:
        """An operator's weight for every replica; it also lifts a rollback (re-enabling)."""
        ...

    def describe(self) -> str: ...

    async def aclose(self) -> None: ...


class LocalCanaries:
    """One replica: each router judges its own window; nothing to share."""

    shared = False

    def __init__(self, metrics: RoutingMetrics) -> None:
        self.metrics = metrics

    async def start(self, routers: Routers) -> None:
        return None

    async def set_weight(self, router: ModelRouter, variant: str, weight: float, by: str) -> None:
        if apply_weight(router, variant, weight, by, self.metrics):
            self.metrics.reenables.labels(router.name, variant).inc()

    def describe(self) -> str:
        return "local"

    async def aclose(self) -> None:
        return None


def apply_weight(
    router: ModelRouter, variant: str, weight: float, by: str, metrics: RoutingMetrics
) -> bool:
    """Set the weight here and publish it; True (and counted) when it re-enabled the variant."""
    lifted = router.set_weight(variant, weight, by)
    metrics.variant_weight.labels(router.name, variant).set(weight)
    metrics.rolled_back.labels(router.name, variant).set(0)
    return lifted
