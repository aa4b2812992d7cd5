"""Stage 3, admit, and its other half, settle: reserve before forwarding, true up afterwards.

A request reserves its counted prompt tokens plus its ``max_tokens`` (or the configured default)
against its key and its tenant, both or neither. After the response the reservation is settled to
the upstream's usage; a failure before any output refunds it::

    limiter = RateLimiter.build(config.limits, gateway_metrics)
    subjects = limiter.subjects(principal)                 # () when nothing limits the caller
    reservation = await limiter.admit("gw-id-1", subjects, tokens=1000, money=4200)  # or 429
    reservation.headers                                                  # x-ratelimit-* quotas
    ...
    limiter.settle(reservation, used_tokens=950, cost=3100)              # never blocks or raises

``money`` is the request's maximum cost in micro-units, reserved against the subjects' budgets
by the same backend call (in Redis, the same script) as the tokens; ``cost`` what it cost. The
request id that keys the concurrency slot is the one the gateway made, never the client's.

When the store cannot answer, ``limits.on_backend_error`` decides for the rate limits, but a
request a hard budget applies to is refused (503) whatever it says: a money limit that admitted
blind could overspend without bound while the store is down. Soft budgets follow the policy.
"""

from __future__ import annotations

import logging
from typing import Protocol

from pydantic import BaseModel

from gateway.clock import SYSTEM_CLOCK, Clock
from gateway.errors import LimiterUnavailable
from gateway.extras import require
from gateway.limits.alerts import BudgetAlerter
from gateway.limits.config import LimitsConfig, LimitValues
from gateway.limits.headers import Header, quota_headers, refusal_error
from gateway.limits.memory import MemoryLimiter
from gateway.limits.metrics import LimitMetrics
from gateway.limits.types import BackendUnavailable, LimiterBackend, Subject, Ticket
from gateway.metrics import GatewayMetrics
from gateway.values import value

logger = logging.getLogger(__name__)

ANONYMOUS = "anonymous"
"""The key id limited when authentication is off: every caller shares the default limits."""


class Identity(Protocol):
    """Who a request acts for (the auth stage's principal): its key, its tenant, their limits."""

    @property
    def key_id(self) -> str: ...

    @property
    def tenant_id(self) -> str: ...

    @property
    def limits(self) -> BaseModel:
        """The key's limits over its tenant's."""

    @property
    def tenant_limits(self) -> BaseModel: ...


@value
class Reservation:
    ticket: Ticket | None
    """None when nothing was taken (no limits apply, or the store failed open)."""
    tokens: int
    headers: tuple[Header, ...] = ()
    """The quota headers every response of the request carries."""
    money: int = 0
    """Micro-units reserved against the budgets."""


def build_backend(config: LimitsConfig, clock: Clock = SYSTEM_CLOCK) -> LimiterBackend:
    """In-process (on the app's clock), or Redis (on Redis's own, one clock for all replicas)."""
    if config.backend == "redis":
        assert config.redis_url is not None  # the config validator guarantees it
        require("redis", "limits.backend: redis")
        from gateway.limits.redis_backend import RedisLimiter  # only with the redis extra

        return RedisLimiter(
            config.redis_url,
            prefix=config.key_prefix,
            lease=config.concurrency_lease,
            max_connections=config.redis_max_connections,
            timeout=config.redis_timeout,
        )
    return MemoryLimiter(clock=clock.wall)


class RateLimiter:
    def __init__(
        self,
        config: LimitsConfig,
        backend: LimiterBackend,
        metrics: LimitMetrics,
        alerter: BudgetAlerter | None = None,
    ):
        self.config = config
        self.metrics = metrics
        self.alerter = alerter or BudgetAlerter(config.budget_alerts, metrics.gateway)
        self.backend = backend
        self.reachable = True
        # By the limits object's identity (it is kept in the entry, so its id is not reused):
        # hashing and comparing pydantic models field by field cost more than the conversion.
        self._values: dict[int, tuple[BaseModel, LimitValues]] = {}
        # Likewise by the principal's identity: the authenticator keeps one per key it caches.
        self._subjects: dict[int, tuple[Identity, tuple[Subject, ...]]] = {}
        defaults = config.defaults
        self._anonymous = () if defaults.unlimited else (Subject("key", ANONYMOUS, defaults),)

    @property
    def backend(self) -> LimiterBackend:
        return self._backend

    @backend.setter
    def backend(self, backend: LimiterBackend) -> None:
        """The store; its settlements' budget alerts go to this limiter's alerter."""
        backend.on_alert = self.alerter.fire
        self._backend = backend

    @classmethod
    def build(
        cls, config: LimitsConfig, metrics: GatewayMetrics, clock: Clock = SYSTEM_CLOCK
    ) -> RateLimiter:
        limit_metrics = LimitMetrics(metrics)
        return cls(config, build_backend(config, clock), limit_metrics)

    async def admit(
        self, request_id: str, subjects: tuple[Subject, ...], tokens: int, money: int = 0
    ) -> Reservation:
        """Reserve ``tokens`` and ``money`` for ``subjects`` (see :meth:`subjects`); raises the
        429 (with the quota headers), or the policy's 503 (a hard budget's, whatever it is)."""
        if not subjects:
            return Reservation(None, tokens)
        try:
            decision = await self.backend.acquire(subjects, tokens, request_id, money)
        except BackendUnavailable as err:
            self._unreachable(err, hard_budget=money > 0 and _hard_budget(subjects))
            return Reservation(None, tokens)
        self._reached()
        headers = tuple(quota_headers(decision))
        refusal = decision.refusal
        if refusal is not None:
            tenant = next((s.id for s in subjects if s.scope == "tenant"), "")
            self.metrics.refusals.labels(
                tenant, f"{refusal.subject.scope} {refusal.limit_name}"
            ).inc()
            raise refusal_error(refusal, headers)
        return Reservation(decision.ticket, tokens, headers, money)

    def settle(self, reservation: Reservation, used_tokens: int, cost: int = 0) -> None:
        """True the reservation up to ``used_tokens`` and ``cost`` (0: a refund) and free its
        slot."""
        if reservation.ticket is not None:
            self.backend.settle(reservation.ticket, used_tokens, cost)

    def subjects(self, identity: Identity | None) -> tuple[Subject, ...]:
        """Who this request is limited as: its key and its tenant, those with any limit."""
        if not self.config.enabled:
            return ()
        if identity is None:
            return self._anonymous
        entry = self._subjects.get(id(identity))
        if entry is not None and entry[0] is identity:
            return entry[1]
        key = Subject("key", identity.key_id, self._resolve(identity.limits))
        tenant = Subject("tenant", identity.tenant_id, self._resolve(identity.tenant_limits))
        subjects = tuple(s for s in (key, tenant) if not s.limits.unlimited)
        if len(self._subjects) > 10_000:
            self._subjects.clear()
        self._subjects[id(identity)] = (identity, subjects)
        return subjects

    def _resolve(self, limits: BaseModel) -> LimitValues:
        """The store's limits over the config's defaults, converted once per limits object."""
        entry = self._values.get(id(limits))
        if entry is not None and entry[0] is limits:
            return entry[1]
        if len(self._values) > 10_000:
            self._values.clear()
        fields = LimitValues.model_fields
        own = {k: v for k, v in limits.model_dump(exclude_none=True).items() if k in fields}
        values = LimitValues(**own).over(self.config.defaults)
        self._values[id(limits)] = (limits, values)
        return values

    def _unreachable(self, err: BackendUnavailable, *, hard_budget: bool = False) -> None:
        policy = "closed" if hard_budget else self.config.on_backend_error
        self.metrics.backend_errors.labels(policy).inc()
        if self.reachable:
            self.reachable = False
            self.metrics.backend_up.set(0)
            logger.error("rate limiter store unreachable, failing %s: %s", policy, err)
        if hard_budget:
            raise LimiterUnavailable(
                "The budget store is unavailable and a hard budget applies; try again shortly."
            )
        if policy == "closed":
            raise LimiterUnavailable("The rate limiter is unavailable; try again shortly.")

    def _reached(self) -> None:
        if not self.reachable:
            self.reachable = True
            self.metrics.backend_up.set(1)
            logger.warning("rate limiter store reachable again")

    async def readiness(self) -> dict[str, object]:
        """For ``/readyz``: the store's state; ``ready`` False only when failing closed."""
        reachable = await self.backend.ping()
        if reachable:
            self._reached()
        elif self.reachable:
            self._unreachable_noted()
        return {
            "backend": self.config.backend,
            "reachable": reachable,
            "on_backend_error": self.config.on_backend_error,
            "ready": reachable or self.config.on_backend_error == "open",
        }

    def _unreachable_noted(self) -> None:
        self.reachable = False
        self.metrics.backend_up.set(0)
        logger.error("rate limiter store unreachable (readiness check)")

    async def budget_state(self, subject: Subject) -> tuple[int, int, int]:
        """(period, committed, spent) of ``subject``'s budget; raises BackendUnavailable."""
        return await self.backend.budget_state(subject)

    async def aclose(self) -> None:
        await self.backend.aclose()
        await self.alerter.aclose()


def _hard_budget(subjects: tuple[Subject, ...]) -> bool:
    return any(s.limits.budget is not None and s.limits.budget.hard for s in subjects)
