"""Rate-limit configuration: the backend, the failure policy and the default limit values.

limits:
  backend: redis            # or "memory" (one replica, the default)
  redis_url: redis://127.0.0.1:6379/0
  on_backend_error: open    # admit when Redis is unreachable ("closed": refuse with 503)
  defaults: {requests_per_minute: 600, tokens_per_minute: 200000, concurrent_requests: 32}
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from configkit import StrictModel
from gateway.limits.alerts import BudgetAlertsConfig
from gateway.limits.budgets import Budget


class LimitValues(StrictModel):
    """The four limits of one key or tenant; ``None`` means "not set here, fall back"."""

    requests_per_minute: int | None = Field(None, ge=1)
    tokens_per_minute: int | None = Field(None, ge=1)
    concurrent_requests: int | None = Field(None, ge=1)
    daily_tokens: int | None = Field(None, ge=1)
    budget: Budget | None = None
    """Money (``budgets.py``): a subject's own, never inherited (a key's budget is a second
    counter beside its tenant's, not a copy of it)."""

    def over(self, fallback: LimitValues) -> LimitValues:
        """These values, each unset one taken from ``fallback`` (the budget never is)."""
        return LimitValues(
            budget=self.budget,
            requests_per_minute=_first(self.requests_per_minute, fallback.requests_per_minute),
            tokens_per_minute=_first(self.tokens_per_minute, fallback.tokens_per_minute),
            concurrent_requests=_first(self.concurrent_requests, fallback.concurrent_requests),
            daily_tokens=_first(self.daily_tokens, fallback.daily_tokens),
        )

    @property
    def unlimited(self) -> bool:
        return (
            self.requests_per_minute is None
            and self.tokens_per_minute is None
            and self.concurrent_requests is None
            and self.daily_tokens is None
            and self.budget is None
        )


def _first(value: int | None, fallback: int | None) -> int | None:
    return fallback if value is None else value


class LimitsConfig(StrictModel):
    enabled: bool = True
    backend: Literal["memory", "redis"] = "memory"
    redis_url: str | None = None
    redis_max_connections: int = Field(64, ge=1)
    """redis-py's pool; callers wait for a free connection rather than fail when it is full."""
    redis_timeout: float = Field(0.5, gt=0)
    """Seconds a Redis call may take before the failure policy applies."""
    key_prefix: str = "pdgw:rl"
    on_backend_error: Literal["open", "closed"] = "open"
    """When the backend cannot be reached: admit unlimited ("open") or refuse with 503."""
    defaults: LimitValues = LimitValues()
    """Used for every value neither the key nor its tenant sets."""
    default_max_tokens: int = Field(1024, ge=1)
    """Output tokens reserved for a request that does not say ``max_tokens``."""
    budget_alerts: BudgetAlertsConfig = BudgetAlertsConfig()
    """Where budget alerts go besides the log and the metric (``alerts.py``)."""
    concurrency_lease: float = Field(3600.0, gt=0)
    """Seconds after which an in-flight slot a crashed replica never released expires (Redis)."""

    @model_validator(mode="after")
    def _no_default_budget(self) -> LimitsConfig:
        if self.defaults.budget is not None:
            raise ValueError("defaults.budget: budgets are set per tenant or per key")
        return self

    @model_validator(mode="after")
    def _redis_needs_url(self) -> LimitsConfig:
        if self.backend == "redis" and not self.redis_url:
            raise ValueError("redis_url: required when backend is redis")
        return self
