"""Sending one request along a route plan: replica choice, failover, retries, passive health.

An attempt that cannot connect, or that answers 5xx, is retried on another replica (of the same
pool first, then the plan's next pool) while attempts and the retry budget last. Retries happen
only here, before the response is handed to the relay, so never after a byte reached the client.
The replica's breaker learns every outcome, the one of the relayed response included::

    async with dispatcher.connect(plan, ctx, send_to) as attempt:
        await relay(attempt.response)
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from types import TracebackType

from gateway.context import RequestContext
from gateway.errors import GatewayError, NoHealthyUpstream
from gateway.proxy.upstream import UpstreamConnectError, UpstreamResponse
from gateway.routing.config import RetryConfig
from gateway.routing.metrics import RoutingMetrics
from gateway.routing.pools import Pool, Replica
from gateway.routing.router import RoutePlan

SendTo = Callable[[Pool, Replica, str | None], Awaitable[UpstreamResponse]]
"""``await send_to(pool, replica, upstream_model)``: the upstream's response, at its headers."""


@dataclass(slots=True)
class Attempt:
    pool: Pool
    replica: Replica
    response: UpstreamResponse


class Connection:
    """``async with dispatcher.connect(plan, ctx, send_to) as attempt``: on entry, the attempt
    that answered (retries and failover done); on exit, its replica released and the outcome
    told to the replica's breaker. A class rather than a generator-based context manager, which
    costs several microseconds per request."""

    __slots__ = ("_ctx", "_dispatcher", "_plan", "_send_to", "attempt")

    def __init__(
        self, dispatcher: Dispatcher, plan: RoutePlan, ctx: RequestContext, send_to: SendTo
    ) -> None:
        self._dispatcher = dispatcher
        self._plan = plan
        self._ctx = ctx
        self._send_to = send_to

    async def __aenter__(self) -> Attempt:
        dispatcher = self._dispatcher
        dispatcher.budget.on_request()
        self.attempt = await dispatcher.first_answer(self._plan, self._ctx, self._send_to)
        return self.attempt

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        attempt = self.attempt
        pool, replica = attempt.pool, attempt.replica
        pool.give_back(replica)
        if exc_type is None:
            pool.record(replica, _failure(attempt.response.status, self._ctx))
        elif issubclass(exc_type, asyncio.CancelledError):  # the client left: no verdict
            replica.breaker.abandon()
        else:
            pool.record(replica, "relay failed")


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

    def connect(self, plan: RoutePlan, ctx: RequestContext, send_to: SendTo) -> Connection:
        return Connection(self, plan, ctx, send_to)

    async def first_answer(self, plan: RoutePlan, ctx: RequestContext, send_to: SendTo) -> Attempt:
        tried: list[Replica] = []
        for number in range(1, self.max_attempts + 1):
            pool, replica = self._take(plan, ctx, tried)
            tried.append(replica)
            last = number == self.max_attempts
            try:
                response = await send_to(pool, replica, plan.variant.upstream_model)
            except UpstreamConnectError as err:
                pool.give_back(replica)
                pool.trip(replica, err.message)
                if last or not self._may_retry(plan, ctx, pool, "connect", tried):
                    raise
                continue
            except BaseException as err:
                pool.give_back(replica)
                if isinstance(err, asyncio.CancelledError):
                    replica.breaker.abandon()
                elif isinstance(err, GatewayError):
                    pool.record(replica, err.code or "error")
                raise
            if response.status < 500 or last:
                return Attempt(pool, replica, response)
            if not self._may_retry(plan, ctx, pool, "status_5xx", tried):
                return Attempt(pool, replica, response)
            response.abort()
            pool.give_back(replica)
            pool.record(replica, f"status {response.status}")
        raise AssertionError("unreachable: the last attempt returns or raises")

    def _may_retry(
        self, plan: RoutePlan, ctx: RequestContext, pool: Pool, cause: str, tried: list[Replica]
    ) -> bool:
        if not _any_left(plan, tried):
            return False
        if not self.budget.try_spend():
            self.metrics.retries_refused.labels(ctx.model or "").inc()
            return False
        self.metrics.retries.labels(ctx.model or "", pool.name, cause).inc()
        return True

    def _take(
        self, plan: RoutePlan, ctx: RequestContext, tried: list[Replica]
    ) -> tuple[Pool, Replica]:
        try:
            pool, reason, skipped = _pick(plan, tried)
        except _NoPool as none:
            ctx.routing_reason = plan.pools[0][1] + "+unavailable"
            raise NoHealthyUpstream(
                f"No upstream can take this request now ({none.why}); try again shortly.",
                headers={"retry-after": "1"},
            ) from None
        replica = pool.take(tried)
        ctx.pool, ctx.replica = pool.name, replica.url
        ctx.routing_reason = reason if skipped is None else f"{reason}+failover_{skipped}"
        return pool, replica


def _pick(plan: RoutePlan, tried: list[Replica]) -> tuple[Pool, str, str | None]:
    """The first pool of the plan that can take the request; why the preferred one could not."""
    skipped: str | None = None
    for pool, reason in plan.pools:
        if pool.saturated:
            why = "saturated"
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


def _failure(status: int, ctx: RequestContext) -> str | None:
    """The breaker's verdict on a relayed response: None when the replica did its job."""
    if status >= 500:
        return f"status {status}"
    if ctx.error_code is not None:  # set by the relay when the stream broke or stalled
        return ctx.error_code
    return None
