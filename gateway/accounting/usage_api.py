"""The usage reports, read from the ledger (rows arrive within the ledger's write interval).

    GET /v1/usage?start_time=&end_time=        the caller's own key, by day and model
    GET /admin/usage?tenant_id=&key_id=&model=&start_time=&end_time=&group_by=tenant_id,key_id
                                               any tenant or key (admin keys only)

Times are UNIX seconds, ``start_time`` inclusive and ``end_time`` exclusive.
"""

from __future__ import annotations

from typing import Any

import orjson
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

from gateway.accounting.ledger_sql import SqlLedgerStore, UsageQuery
from gateway.errors import InvalidParameter
from gateway.wire.outcome import PRINCIPAL_KEY

ADMIN_GROUPS = ("day", "tenant_id", "key_id", "model")
DEFAULT_ADMIN_GROUPS = ("tenant_id", "key_id", "model")


class UsageApi:
    def __init__(self, store: SqlLedgerStore) -> None:
        self.store = store

    async def own(self, request: Request) -> Response:
        """Without authentication there is one caller: the report covers every request."""
        principal = request.scope.get(PRINCIPAL_KEY)
        start, end = _time_range(request)
        query = UsageQuery(
            group_by=("day", "model"),
            key_id=None if principal is None else principal.key_id,
            start=start,
            end=end,
        )
        return _listing(await self.store.report(query))

    async def admin(self, request: Request) -> Response:
        params = request.query_params
        groups = tuple(g for g in params.get("group_by", "").split(",") if g)
        unknown = [g for g in groups if g not in ADMIN_GROUPS]
        if unknown:
            raise InvalidParameter(
                f"group_by: unknown {', '.join(unknown)} (use {', '.join(ADMIN_GROUPS)})",
                param="group_by",
            )
        start, end = _time_range(request)
        query = UsageQuery(
            group_by=groups or DEFAULT_ADMIN_GROUPS,
            tenant_id=params.get("tenant_id"),
            key_id=params.get("key_id"),
            model=params.get("model"),
            start=start,
            end=end,
        )
        return _listing(await self.store.report(query))


def usage_routes(store: SqlLedgerStore, *, admin: bool) -> list[BaseRoute]:
    """``/v1/usage`` always; ``/admin/usage`` only where admin keys guard ``/admin/``."""
    api = UsageApi(store)
    routes: list[BaseRoute] = [Route("/v1/usage", api.own, methods=["GET"])]
    if admin:
        routes.append(Route("/admin/usage", api.admin, methods=["GET"]))
    return routes


def _time_range(request: Request) -> tuple[float | None, float | None]:
    return _seconds(request, "start_time"), _seconds(request, "end_time")


def _seconds(request: Request, name: str) -> float | None:
    value = request.query_params.get(name)
    if value is None:
        return None
    try:
        return float(value)
    except ValueError:
        raise InvalidParameter(f"{name} must be UNIX seconds, got {value!r}", param=name) from None


def _listing(rows: list[dict[str, Any]]) -> Response:
    body = orjson.dumps({"object": "list", "data": rows})
    return Response(body, media_type="application/json")
