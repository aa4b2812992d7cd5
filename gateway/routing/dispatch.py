"""Sending one request along a route plan: replica choice, failover, retries, passive health.

An attempt that cannot connect, or that answers 5xx, is retried on another replica (of the same
pool first, then the plan's next pool) while attempts and the retry budget last. A canary's plan
has a fallback, the baseline's plan: an attempt that fails on the canary (connect error, 5xx, no
answer before the first-byte deadline) is retried there instead, within the same attempts and
budget, and a canary with no replica that can take the request hands it to the baseline at once
(no attempt made, no budget spent). Retries happen only here, before the response is handed to
the relay, so never after a byte reached the client. The replica's breaker learns every outcome,
the one of the relayed response included (:class:`gateway.routing.attempts.Attempts` holds
the replicas and gives them back)::

    with Attempts() as attempts:
        attempt = await dispatcher.first_answer(plan, send_to, attempts)
        clean = await relay(attempt.response)
        attempts.settle(failure, reusable=clean)
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable

from gateway.bucket import Bucket
from gateway.errors import NoHealthyUpstream
from gateway.routing.attempts import Attempt, Attempts
from gateway.routing.config import RetryConfig
from gateway.routing.load import LoadSnapshot
from gateway.routing.metrics import RoutingMetrics
from gateway.routing.pools import Pool, Replica
from gateway.routing.router import RoutePlan
from gateway.upstream.client import UpstreamResponse

SendTo = Callable[[Pool, Replica, str | None], Awaitable[UpstreamResponse]]
"""``await send_to(pool, replica, upstream_model)``: the upstream's response, at its headers."""


class RetryBudget:
    """A token bucket that caps retries at ``budget_ratio`` of requests plus a floor per second,
    so a sick upstream does not get every request multiplied by ``max_attempts``."""

    def __init__(self, config: RetryConfig, clock: Callable[[], float] = time.monotonic) -> None:
        self._ratio = config.budget_ratio
        self._per_second = config.budget_min_per_second
        self._cap = max(10.0, 10 * self._per_second)
        self._clock = clock
        self._bucket = Bucket(self._cap, clock())

    def on_request(self) -> None:
        self._bucket.give_back(self._ratio, self._cap)

    def try_spend(self) -> bool:
        self._bucket.refill(self._per_second, self._cap, self._clock())
        return self._bucket.take()


class _NoPool(Exception):
    """No pool of the plan can take the request now."""

    def __init__(self, why: str) -> None:
        super().__init__(why)
        self.why = why


class Dispatcher:
    def __init__(
        self, config: RetryConfig, metrics: RoutingMetrics, budget: RetryBudget | None = None
    ) -> None:
        self.max_attempts = config.max_attempts
        self.budget = budget or RetryBudget(config)
        self.metrics = metrics

    async def first_answer(
        self,
        plan: RoutePlan,
        send_to: SendTo,
        attempts: Attempts,
        load: LoadSnapshot | None = None,
    ) -> Attempt:
        """The first attempt that answered (retries and failover done), its replica held by
        ``attempts`` until settled. Raises the gateway error of the last failed attempt.
        ``load``: the snapshot flow control let the request through on, which the first choice
        reads (a retry, or no gate, reads a fresh one)."""
        self.budget.on_request()
        tried: list[Replica] = []
        number = 0
        while True:
            try:
                pool, replica = self._take(plan, tried, attempts, load)
                load = None  # spent: what follows the first attempt sees the load then
            except NoHealthyUpstream:
                if plan.fallback is None:
                    raise
                plan = self._fail_over(plan, "unavailable")  # nothing was sent: free
                continue
            tried.append(replica)
            number += 1
            last = number >= self.max_attempts
            try:
                response = await send_to(pool, replica, plan.variant.upstream_model)
            except BaseException as err:
                cause = attempts.failed(err)
                if cause is None or last:
                    raise
                if self._may_fail_over(plan):
                    plan = self._fail_over(plan, cause)
                    continue
                if cause == "connect" and self._may_retry(plan, pool, cause, tried):
                    continue
                raise
            if response.status < 500 or last:
                return attempts.answered(response)
            failing_over = self._may_fail_over(plan)
            if not failing_over and not self._may_retry(plan, pool, "status_5xx", tried):
                return attempts.answered(response)
            attempts.retrying(response)
            if failing_over:
                plan = self._fail_over(plan, "status_5xx")

    def _may_fail_over(self, plan: RoutePlan) -> bool:
        """A failed canary attempt may move to the baseline while the retry budget lasts."""
        if plan.fallback is None:
            return False
        if not self.budget.try_spend():
            self.metrics.retries_refused.labels(plan.model).inc()
            return False
        return True

    def _fail_over(self, plan: RoutePlan, cause: str) -> RoutePlan:
        assert plan.fallback is not None
        self.metrics.failovers.labels(plan.model, plan.variant.name, cause).inc()
        return plan.fallback

    def _may_retry(self, plan: RoutePlan, pool: Pool, cause: str, tried: list[Replica]) -> bool:
        if not _any_left(plan, tried, pool.book.snapshot(p for p, _ in plan.pools)):
            return False
        if not self.budget.try_spend():
            self.metrics.retries_refused.labels(plan.model).inc()
            return False
        self.metrics.retries.labels(plan.model, pool.name, cause).inc()
        return True

    def _take(
        self,
        plan: RoutePlan,
        tried: list[Replica],
        attempts: Attempts,
        load: LoadSnapshot | None,
    ) -> tuple[Pool, Replica]:
        variant = plan.variant.name
        if load is None or any(pool.name not in load.pools for pool, _ in plan.pools):
            load = attempts.snapshot(plan)
        try:
            pool, reason, skipped = _pick(plan, tried, load)
        except _NoPool as none:
            attempts.unavailable(variant, plan.pools[0][1] + "+unavailable")
            raise NoHealthyUpstream(
                f"No upstream can take this request now ({none.why}); try again shortly.",
                headers={"retry-after": "1"},
            ) from None
        why = reason if skipped is None else f"{reason}+failover_{skipped}"
        return pool, attempts.take(pool, tried, variant, why, plan, load.pool(pool.name))


def _saturated(pool: Pool, load: LoadSnapshot) -> bool:
    return load.pool(pool.name).saturation(pool.config) is not None


def _pick(
    plan: RoutePlan, tried: list[Replica], load: LoadSnapshot
) -> tuple[Pool, str, str | None]:
    """The first pool of the plan that can take the request; why the preferred one could not."""
    skipped: str | None = None
    for pool, reason in plan.pools:
        if _saturated(pool, load):
            why = "saturated"  # the bound is in the pool's saturation (metrics, admin view)
        elif any(r.available and r not in tried for r in pool.replicas):
            return pool, reason, skipped
        elif any(r in tried for r in pool.replicas):
            why = "failed"
        else:
            why = "unhealthy"
        skipped = skipped or why
    raise _NoPool(" and ".join(sorted({_why_not(pool, load) for pool, _ in plan.pools})))


def _why_not(pool: Pool, load: LoadSnapshot) -> str:
    if _saturated(pool, load):
        return f"pool {pool.name} saturated"
    return f"pool {pool.name} unavailable"


def _any_left(plan: RoutePlan, tried: list[Replica], load: LoadSnapshot) -> bool:
    return any(
        not _saturated(pool, load) and any(r.available and r not in tried for r in pool.replicas)
        for pool, _ in plan.pools
    )
