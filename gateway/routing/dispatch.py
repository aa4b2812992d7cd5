"""Sending one request along a route plan: replica choice, failover, retries, passive health.

An attempt that cannot connect, or that answers 5xx, is retried on another replica (of the same
pool first, then the plan's next pool) while attempts and the retry budget last. A canary's plan
has a fallback, the baseline's plan: an attempt that fails on the canary (connect error, 5xx, no
answer before the first-byte deadline) is retried there instead, within the same attempts and
budget, and a canary with no replica that can take the request hands it to the baseline at once
(no attempt made, no budget spent). Retries happen only here, before the response is handed to
the relay, so never after a byte reached the client. The replica's breaker learns every outcome,
the one of the relayed response included::

    attempt = await dispatcher.first_answer(plan, send_to, trail)
    try:
        await relay(attempt.response)
    finally:
        dispatcher.finish(attempt, failure)
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable

from gateway.errors import GatewayError, NoHealthyUpstream, UpstreamTimeout
from gateway.routing.config import RetryConfig
from gateway.routing.metrics import RoutingMetrics
from gateway.routing.pools import Pool, Replica
from gateway.routing.router import RoutePlan
from gateway.upstream.client import UpstreamConnectError, UpstreamResponse
from gateway.values import value
from gateway.wire.outcome import RouteFacts

SendTo = Callable[[Pool, Replica, str | None], Awaitable[UpstreamResponse]]
"""``await send_to(pool, replica, upstream_model)``: the upstream's response, at its headers."""

Trail = list[RouteFacts]
"""Where each attempt of one request went, in order; the last is where it was served (or, when
no pool could take it, why not)."""


@value
class Attempt:
    pool: Pool
    replica: Replica
    response: UpstreamResponse
    prompt_tokens: int = 0
    """Counted on the pool and replica while the attempt lasts (the gateway's own load view)."""


class RetryBudget:
    """A token bucket that caps retries at ``budget_ratio`` of requests plus a floor per second,
    so a sick upstream does not get every request multiplied by ``max_attempts``."""

    def __init__(self, config: RetryConfig, clock: Callable[[], float] = time.monotonic) -> None:
        self._ratio = config.budget_ratio
        self._per_second = config.budget_min_per_second
        self._cap = max(10.0, 10 * self._per_second)
        self._clock = clock
        self._tokens = self._cap
        self._at = clock()

    def on_request(self) -> None:
        self._tokens = min(self._cap, self._tokens + self._ratio)

    def try_spend(self) -> bool:
        now = self._clock()
        self._tokens = min(self._cap, self._tokens + (now - self._at) * self._per_second)
        self._at = now
        if self._tokens < 1:
            return False
        self._tokens -= 1
        return True


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

    async def first_answer(self, plan: RoutePlan, send_to: SendTo, trail: Trail) -> Attempt:
        """The first attempt that answered (retries and failover done), its replica taken:
        pair with :meth:`finish`. Raises the gateway error of the last failed attempt."""
        self.budget.on_request()
        tried: list[Replica] = []
        number = 0
        while True:
            try:
                pool, replica = self._take(plan, tried, trail)
            except NoHealthyUpstream:
                if plan.fallback is None:
                    raise
                plan = self._fail_over(plan, "unavailable")  # nothing was sent: free
                continue
            tried.append(replica)
            number += 1
            last = number >= self.max_attempts
            tokens = plan.prompt_tokens
            try:
                response = await send_to(pool, replica, plan.variant.upstream_model)
            except BaseException as err:
                cause = _settle_failed(pool, replica, err, tokens)
                if cause is None or last:
                    raise
                if self._may_fail_over(plan):
                    plan = self._fail_over(plan, cause)
                    continue
                if cause == "connect" and self._may_retry(plan, pool, cause, tried):
                    continue
                raise
            if response.status < 500 or last:
                return Attempt(pool, replica, response, tokens)
            failing_over = self._may_fail_over(plan)
            if not failing_over and not self._may_retry(plan, pool, "status_5xx", tried):
                return Attempt(pool, replica, response, tokens)
            response.abort()
            pool.give_back(replica, tokens)
            pool.record(replica, f"status {response.status}")
            if failing_over:
                plan = self._fail_over(plan, "status_5xx")

    @staticmethod
    def finish(attempt: Attempt, failure: str | None, *, abandoned: bool = False) -> None:
        """Give the attempt's replica back and tell its breaker how it went: ``failure`` None
        when the replica did its job; ``abandoned`` (the client left) gives no verdict."""
        attempt.pool.give_back(attempt.replica, attempt.prompt_tokens)
        if abandoned:
            attempt.replica.breaker.abandon()
        else:
            attempt.pool.record(attempt.replica, failure)

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
        if not _any_left(plan, tried):
            return False
        if not self.budget.try_spend():
            self.metrics.retries_refused.labels(plan.model).inc()
            return False
        self.metrics.retries.labels(plan.model, pool.name, cause).inc()
        return True

    def _take(self, plan: RoutePlan, tried: list[Replica], trail: Trail) -> tuple[Pool, Replica]:
        variant = plan.variant.name
        try:
            pool, reason, skipped = _pick(plan, tried)
        except _NoPool as none:
            trail.append(RouteFacts(variant, None, None, plan.pools[0][1] + "+unavailable"))
            raise NoHealthyUpstream(
                f"No upstream can take this request now ({none.why}); try again shortly.",
                headers={"retry-after": "1"},
            ) from None
        replica = pool.take(tried, plan.scores(pool), plan.prompt_tokens, plan.blocks)
        why = reason if skipped is None else f"{reason}+failover_{skipped}"
        trail.append(RouteFacts(variant, pool.name, replica.label, why))  # credentials redacted
        return pool, replica


def _settle_failed(
    pool: Pool, replica: Replica, err: BaseException, prompt_tokens: int
) -> str | None:
    """Free the replica of an attempt that raised and tell its breaker; the cause when the
    request may go elsewhere (``connect``; ``timeout``, only to a canary's baseline)."""
    pool.give_back(replica, prompt_tokens)
    if isinstance(err, UpstreamConnectError):
        pool.trip(replica, err.message)
        return "connect"
    if isinstance(err, asyncio.CancelledError):
        replica.breaker.abandon()
    elif isinstance(err, GatewayError):
        pool.record(replica, err.code or "error")
        if isinstance(err, UpstreamTimeout):
            return "timeout"
    return None


def _pick(plan: RoutePlan, tried: list[Replica]) -> tuple[Pool, str, str | None]:
    """The first pool of the plan that can take the request; why the preferred one could not."""
    skipped: str | None = None
    for pool, reason in plan.pools:
        if pool.saturated:
            why = "saturated"  # the bound is in the pool's saturation (metrics, admin view)
        elif any(r.available and r not in tried for r in pool.replicas):
            return pool, reason, skipped
        elif any(r in tried for r in pool.replicas):
            why = "failed"
        else:
            why = "unhealthy"
        skipped = skipped or why
    raise _NoPool(" and ".join(sorted({_why_not(pool) for pool, _ in plan.pools})))


def _why_not(pool: Pool) -> str:
    if pool.saturated:
        return f"pool {pool.name} saturated"
    return f"pool {pool.name} unavailable"


def _any_left(plan: RoutePlan, tried: list[Replica]) -> bool:
    return any(
        not pool.saturated and any(r.available and r not in tried for r in pool.replicas)
        for pool, _ in plan.pools
    )
