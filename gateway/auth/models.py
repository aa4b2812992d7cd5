"""What the key store holds (tenants, keys, admin keys) and what a request gets (Principal)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import field
from typing import Any

from pydantic import Field

from configkit import StrictModel
from gateway.limits.budgets import Budget
from gateway.values import value


class Limits(StrictModel):
    """Per-key limits; unset fields fall back to the tenant's defaults, then to no limit."""

    requests_per_minute: int | None = Field(None, ge=1)
    tokens_per_minute: int | None = Field(None, ge=1)
    concurrent_requests: int | None = Field(None, ge=1)
    daily_tokens: int | None = Field(None, ge=1)
    """Input + output tokens per UTC day (the rate limiter's quota)."""
    budget: Budget | None = None
    """Money per period (gateway/limits/budgets.py); never inherited from the tenant."""

    def over(self, defaults: Limits) -> Limits:
        """These limits, with ``defaults`` filling what is unset; not the budget: a key's
        budget is its own counter, checked beside its tenant's, never a copy of it."""
        inherited = defaults.model_copy(update={"budget": self.budget})
        return inherited.model_copy(update=self.model_dump(exclude_none=True, exclude={"budget"}))


NO_LIMITS = Limits()


@value
class Tenant:
    id: str
    name: str
    allowed_models: frozenset[str] | None
    """None: every model the gateway serves."""
    limits: Limits
    labels: Mapping[str, str]
    enabled: bool
    created_at: float
    updated_at: float

    def public(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "object": "tenant",
            "name": self.name,
            "allowed_models": _sorted_or_none(self.allowed_models),
            "limits": self.limits.model_dump(mode="json", exclude_none=True),
            "labels": dict(self.labels),
            "enabled": self.enabled,
            "created_at": self.created_at,
            "updated_at": self.updated_at,
        }


@value
class ApiKey:
    """A tenant key as stored: never its secret, only the secret's hash (kept out of ``public``)."""

    id: str
    tenant_id: str
    name: str
    secret_hash: str = field(repr=False)
    allowed_models: frozenset[str] | None
    limits: Limits
    expires_at: float | None
    revoked_at: float | None
    created_at: float
    last_used_at: float | None
    previous_secret_hash: str | None = field(default=None, repr=False)
    previous_secret_expires_at: float | None = None

    def public(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "object": "api_key",
            "tenant_id": self.tenant_id,
            "name": self.name,
            "allowed_models": _sorted_or_none(self.allowed_models),
            "limits": self.limits.model_dump(mode="json", exclude_none=True),
            "expires_at": self.expires_at,
            "revoked": self.revoked_at is not None,
            "revoked_at": self.revoked_at,
            "created_at": self.created_at,
            "last_used_at": self.last_used_at,
            "previous_secret_expires_at": self.previous_secret_expires_at,
        }


@value
class AdminKey:
    id: str
    name: str
    secret_hash: str = field(repr=False)
    revoked_at: float | None
    created_at: float
    last_used_at: float | None

    def public(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "object": "admin_key",
            "name": self.name,
            "revoked": self.revoked_at is not None,
            "created_at": self.created_at,
            "last_used_at": self.last_used_at,
        }


@value
class Principal:
    """Who a request acts for, once its key checked out; on ``RequestContext.principal``.

    ``key_id`` (the key's public id) names it in logs, metrics, spans and limits. ``limits`` are
    the key's own over the tenant's defaults; ``tenant_limits`` the tenant's alone.
    """

    key_id: str
    key_name: str
    tenant_id: str
    allowed_models: frozenset[str] | None
    limits: Limits
    tenant_limits: Limits
    labels: Mapping[str, str]

    def may_use(self, model: str) -> bool:
        return self.allowed_models is None or model in self.allowed_models


def effective_models(
    tenant: frozenset[str] | None, key: frozenset[str] | None
) -> frozenset[str] | None:
    """A key sees what both it and its tenant allow."""
    if tenant is None:
        return key
    if key is None:
        return tenant
    return tenant & key


def _sorted_or_none(models: frozenset[str] | None) -> list[str] | None:
    return None if models is None else sorted(models)
