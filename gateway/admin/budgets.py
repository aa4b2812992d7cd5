"""The budgets' admin routes: a tenant's or a key's budget, what it has spent and when it resets.

    GET    /admin/tenants/{tenant}/budget   the budget (or null), spent, committed, remaining
    PUT    /admin/tenants/{tenant}/budget   {"amount", "currency"?, "period"?, "mode"?,
                                             "alert_thresholds"?}: sets or replaces it
    DELETE /admin/tenants/{tenant}/budget   lifts it (the other limits stay)
    GET|PUT|DELETE /admin/keys/{key}/budget the same for one key (never its tenant's)

Admin keys only (the /admin/ prefix: ``auth/middleware``). The budget is kept in the tenant's or
key's ``limits`` in the key store, so every replica reads it within ``auth.cache_seconds``; the
figures come from the limiter's counters (on Redis, the ones every replica shares). Replacing a
budget keeps what was spent this period: changing an amount is not a way to forgive spending.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

from gateway.accounting.prices import format_money
from gateway.accounting.stage import Accounting
from gateway.admin.api import Endpoint, _json, _spec, _translated
from gateway.auth.manage import InvalidSpec, KeyUpdate, TenantUpdate
from gateway.auth.models import Limits
from gateway.auth.service import AuthService
from gateway.errors import LimiterUnavailable
from gateway.limits.budgets import Budget, iso, period_reset
from gateway.limits.config import LimitValues
from gateway.limits.types import BackendUnavailable, Scope, Subject

BUDGET_PATHS = ("/admin/tenants/{tenant}/budget", "/admin/keys/{key}/budget")
REQUEST_MODELS: dict[tuple[str, str], type[BaseModel]] = {("PUT", p): Budget for p in BUDGET_PATHS}
"""PUT's body, for the OpenAPI document."""


def budget_routes(auth: AuthService | None, accounting: Accounting) -> list[BaseRoute]:
    """Before the /admin mount, which would answer these paths with its 404 otherwise."""
    if auth is None or not auth.config.admin_api:
        return []
    api = BudgetApi(auth, accounting)
    table: list[tuple[str, Endpoint]] = [
        ("GET", api.show),
        ("PUT", api.put),
        ("DELETE", api.delete),
    ]
    return [
        Route(path, _translated(fn), methods=[method])
        for path in BUDGET_PATHS
        for method, fn in table
    ]


def _scope(request: Request) -> Scope:
    return "tenant" if "tenant" in request.path_params else "key"


class BudgetApi:
    def __init__(self, auth: AuthService, accounting: Accounting) -> None:
        self.manager = auth.manager
        self.authenticator = auth.authenticator
        self.accounting = accounting

    async def show(self, request: Request) -> Response:
        scope = _scope(request)
        subject_id, limits = await self._limits(request, scope)
        return _json(await self.view(scope, subject_id, limits.budget))

    async def put(self, request: Request) -> Response:
        budget = await _spec(request, Budget)
        problem = budget.currency_error(self.accounting.prices.currency)
        if problem is not None:
            raise InvalidSpec(problem)
        return await self._replace(request, budget)

    async def delete(self, request: Request) -> Response:
        return await self._replace(request, None)

    async def _replace(self, request: Request, budget: Budget | None) -> Response:
        scope = _scope(request)
        subject_id, limits = await self._limits(request, scope)
        limits = limits.model_copy(update={"budget": budget})
        if scope == "tenant":
            await self.manager.set_tenant_limits(subject_id, TenantUpdate(limits=limits))
            self.authenticator.forget()  # every cached key of the tenant carries its limits
        else:
            await self.manager.update_key(subject_id, KeyUpdate(limits=limits))
            self.authenticator.forget(subject_id)
        return _json(await self.view(scope, subject_id, budget))

    async def _limits(self, request: Request, scope: Scope) -> tuple[str, Limits]:
        if scope == "tenant":
            tenant = await self.manager.tenant(request.path_params["tenant"])
            return tenant.id, tenant.limits
        key = await self.manager.key(request.path_params["key"])
        return key.id, key.limits

    async def view(self, scope: Scope, subject_id: str, budget: Budget | None) -> dict[str, Any]:
        """The budget and its figures now; ``null`` figures when there is none."""
        body: dict[str, Any] = {
            "object": "budget",
            "scope": scope,
            "id": subject_id,
            "budget": None if budget is None else budget.model_dump(mode="json"),
            "currency": self.accounting.prices.currency,
        }
        if budget is None:
            return body | dict.fromkeys(("spent_micros", "remaining_micros", "resets_at"))
        subject = Subject(scope, subject_id, LimitValues(budget=budget))
        try:
            period, committed, spent = await self.accounting.limiter.budget_state(subject)
        except BackendUnavailable:
            raise LimiterUnavailable(
                "The budget store is unavailable; try again shortly."
            ) from None
        remaining = max(0, budget.micros - committed)
        return body | {
            "amount_micros": budget.micros,
            "spent_micros": spent,
            "committed_micros": committed,
            "remaining_micros": remaining,
            "spent": format_money(spent),
            "remaining": format_money(remaining),
            "resets_at": iso(period_reset(budget.period, period)),
        }
