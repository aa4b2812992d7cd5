"""The admin API under ``/admin/``: tenants and keys, for admin keys only (see auth/middleware).

    POST /admin/tenants                     {"id", "name"?, "allowed_models"?, "limits"?, "labels"?}
    GET  /admin/tenants
    GET  /admin/tenants/{tenant}
    PATCH /admin/tenants/{tenant}           {"limits"}: replaces the tenant's limits
    POST /admin/tenants/{tenant}/disable    and /enable
    POST /admin/tenants/{tenant}/keys       {"name", "allowed_models"?, "limits"?, "expires_*"?}
    GET  /admin/tenants/{tenant}/keys
    GET  /admin/keys                        every tenant's keys
    GET  /admin/keys/{key}
    PATCH /admin/keys/{key}                 {"limits"?, "expires_at"?, "clear_expiry"?}
    POST /admin/keys/{key}/revoke
    POST /admin/keys/{key}/rotate           {"grace_seconds"?}

    GET  /v1/keys                           a tenant key: its own tenant's keys (read only)

Created and rotated keys carry their secret (``"key"``) in that one response; listings never do.
Tenant keys may list their tenant's keys but not create or revoke any: a leaked key that could
mint keys would outlive its own revocation.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import orjson
from pydantic import BaseModel, ValidationError
from sqlalchemy.exc import SQLAlchemyError
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Mount, Route

from configkit import format_validation_error
from gateway.auth.manage import (
    InvalidSpec,
    KeySpec,
    KeyUpdate,
    RotateSpec,
    TenantSpec,
    TenantUpdate,
    UnknownRecord,
)
from gateway.auth.models import Limits
from gateway.auth.service import AuthService
from gateway.auth.store import RecordExists
from gateway.errors import (
    Conflict,
    InvalidJSON,
    InvalidParameter,
    KeyStoreUnavailable,
    NotFound,
)
from gateway.wire.outcome import PRINCIPAL_KEY

logger = logging.getLogger(__name__)
SpecT = TypeVar("SpecT", bound=BaseModel)
Endpoint = Callable[[Request], Awaitable[Response]]


# The bodies the routes below parse, by model: the OpenAPI document describes them by these.
REQUEST_MODELS: dict[tuple[str, str], type[BaseModel]] = {
    ("POST", "/admin/tenants"): TenantSpec,
    ("PATCH", "/admin/tenants/{tenant}"): TenantUpdate,
    ("POST", "/admin/tenants/{tenant}/keys"): KeySpec,
    ("PATCH", "/admin/keys/{key}"): KeyUpdate,
    ("POST", "/admin/keys/{key}/rotate"): RotateSpec,
}


def admin_routes(
    auth: AuthService | None, currency: Callable[[], str | None] = lambda: None
) -> list[BaseRoute]:
    """The /admin/ tenant and key routes (none when authentication or the admin API is off);
    ``currency`` is the prices' now, which a budget in limits must be kept in."""
    if auth is None or not auth.config.admin_api:
        return []
    api = AdminApi(auth, currency)
    table: list[tuple[str, str, Endpoint]] = [
        ("GET", "/tenants", api.list_tenants),
        ("POST", "/tenants", api.create_tenant),
        ("GET", "/tenants/{tenant}", api.get_tenant),
        ("PATCH", "/tenants/{tenant}", api.update_tenant),
        ("POST", "/tenants/{tenant}/disable", api.disable_tenant),
        ("POST", "/tenants/{tenant}/enable", api.enable_tenant),
        ("GET", "/tenants/{tenant}/keys", api.list_tenant_keys),
        ("POST", "/tenants/{tenant}/keys", api.create_key),
        ("GET", "/keys", api.list_keys),
        ("GET", "/keys/{key}", api.get_key),
        ("PATCH", "/keys/{key}", api.update_key),
        ("POST", "/keys/{key}/revoke", api.revoke_key),
        ("POST", "/keys/{key}/rotate", api.rotate_key),
    ]
    routes = [Route(path, _translated(fn), methods=[method]) for method, path, fn in table]
    return [Mount("/admin", routes=routes)]


def own_key_routes(auth: AuthService | None) -> list[BaseRoute]:
    """``GET /v1/keys`` for tenant keys (none when authentication is off)."""
    if auth is None:
        return []
    return [Route("/v1/keys", _translated(AdminApi(auth).list_own_keys), methods=["GET"])]


class AdminApi:
    def __init__(
        self, auth: AuthService, currency: Callable[[], str | None] = lambda: None
    ) -> None:
        self.manager = auth.manager
        self.authenticator = auth.authenticator
        self.currency = currency

    def _budget_checked(self, limits: Limits | None) -> None:
        """A budget in ``limits`` must be in the prices' currency (gateway/limits/budgets.py)."""
        if limits is not None and limits.budget is not None:
            problem = limits.budget.currency_error(self.currency())
            if problem is not None:
                raise InvalidSpec(problem)

    async def list_tenants(self, request: Request) -> Response:
        return _list([t.public() for t in await self.manager.store.tenants()])

    async def create_tenant(self, request: Request) -> Response:
        spec = await _spec(request, TenantSpec)
        self._budget_checked(spec.limits)
        tenant = await self.manager.create_tenant(spec)
        return _json(tenant.public(), 201)

    async def get_tenant(self, request: Request) -> Response:
        return _json((await self.manager.tenant(request.path_params["tenant"])).public())

    async def update_tenant(self, request: Request) -> Response:
        spec = await _spec(request, TenantUpdate)
        self._budget_checked(spec.limits)
        tenant = await self.manager.set_tenant_limits(request.path_params["tenant"], spec)
        self.authenticator.forget()  # every cached key of the tenant carries its limits
        return _json(tenant.public())

    async def disable_tenant(self, request: Request) -> Response:
        return await self._set_enabled(request, False)

    async def enable_tenant(self, request: Request) -> Response:
        return await self._set_enabled(request, True)

    async def list_tenant_keys(self, request: Request) -> Response:
        tenant = await self.manager.tenant(request.path_params["tenant"])
        return _list([k.public() for k in await self.manager.store.keys(tenant.id)])

    async def create_key(self, request: Request) -> Response:
        spec = await _spec(request, KeySpec)
        self._budget_checked(spec.limits)
        issued = await self.manager.create_key(request.path_params["tenant"], spec)
        return _json(issued.public(), 201)

    async def list_keys(self, request: Request) -> Response:
        return _list([k.public() for k in await self.manager.store.keys()])

    async def get_key(self, request: Request) -> Response:
        return _json((await self.manager.key(request.path_params["key"])).public())

    async def update_key(self, request: Request) -> Response:
        spec = await _spec(request, KeyUpdate)
        self._budget_checked(spec.limits)
        key = await self.manager.update_key(request.path_params["key"], spec)
        self.authenticator.forget(key.id)
        return _json(key.public())

    async def list_own_keys(self, request: Request) -> Response:
        """The caller's tenant's keys; the middleware put the tenant key's Principal here."""
        tenant_id = request.scope[PRINCIPAL_KEY].tenant_id
        return _list([k.public() for k in await self.manager.store.keys(tenant_id)])

    async def revoke_key(self, request: Request) -> Response:
        key = await self.manager.revoke_key(request.path_params["key"])
        self.authenticator.forget(key.id)
        return _json(key.public())

    async def rotate_key(self, request: Request) -> Response:
        spec = await _spec(request, RotateSpec, allow_empty=True)
        issued = await self.manager.rotate_key(request.path_params["key"], spec)
        self.authenticator.forget(issued.key.id)
        return _json(issued.public())

    async def _set_enabled(self, request: Request, enabled: bool) -> Response:
        tenant = await self.manager.set_tenant_enabled(request.path_params["tenant"], enabled)
        self.authenticator.forget()  # every cached key of the tenant, on this replica at once
        return _json(tenant.public())


def _translated(endpoint: Endpoint) -> Endpoint:
    """Store and spec errors as the API's OpenAI-shaped errors."""

    async def call(request: Request) -> Response:
        try:
            return await endpoint(request)
        except UnknownRecord as err:
            raise NotFound(str(err)) from None
        except RecordExists as err:
            raise Conflict(str(err)) from None
        except InvalidSpec as err:
            raise InvalidParameter(str(err)) from None
        except (SQLAlchemyError, OSError) as err:  # the message may hold SQL parameters: unlogged
            logger.error("admin API: key store failed: %s", type(err).__name__)
            raise KeyStoreUnavailable("The key store is unavailable; try again shortly.") from None

    return call


async def _spec(request: Request, model: type[SpecT], *, allow_empty: bool = False) -> SpecT:
    body = await request.body()
    if allow_empty and not body.strip():
        body = b"{}"
    try:
        data = orjson.loads(body)
    except orjson.JSONDecodeError:
        raise InvalidJSON("The request body is not valid JSON.") from None
    try:
        return model.model_validate(data)
    except ValidationError as err:
        raise InvalidParameter(format_validation_error(err)) from None


def _json(data: Any, status: int = 200) -> Response:
    return Response(orjson.dumps(data), status, media_type="application/json")


def _list(items: list[dict[str, Any]]) -> Response:
    return _json({"object": "list", "data": items})
