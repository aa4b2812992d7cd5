"""The usage reports, read from the ledger (rows arrive within the ledger's write interval).

    GET /v1/usage?start_time=&end_time=&group_by=day,model&scope=key
        a tenant key's own usage (``scope=key``, the default) or its whole tenant's
        (``scope=tenant``), grouped by some of day, key_id, model
    GET /admin/usage?tenant_id=&key_id=&model=&start_time=&end_time=&group_by=tenant_id,key_id
        any tenant or key (admin keys only)

Times are UNIX seconds, ``start_time`` inclusive and ``end_time`` exclusive; whole UTC days
(multiples of 86400) are answered from the daily totals. The answer is
``{"object": "list", "data": [...], "has_more": false}``; ``has_more`` says the report was cut at
``MAX_REPORT_ROWS`` groups. Each group has its money beside its tokens: ``cost_micros`` (the sum of
its rows' costs, an integer of micro-units), ``cost`` (the same as an exact decimal string) and
``currency``. ``/v1/usage/export`` and ``/admin/usage/export`` take the same parameters and
answer the same groups as CSV, whose ``cost_micros`` column sums to the ledger's.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Callable

import orjson
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

from gateway.accounting.daily import TOTALS
from gateway.accounting.ledger_sql import Report, SqlLedgerStore, UsageQuery
from gateway.accounting.prices import format_money
from gateway.errors import InvalidParameter
from gateway.wire.outcome import PRINCIPAL_KEY

ADMIN_GROUPS = ("day", "tenant_id", "key_id", "model")
DEFAULT_ADMIN_GROUPS = ("tenant_id", "key_id", "model")
OWN_GROUPS = ("day", "key_id", "model")
DEFAULT_OWN_GROUPS = ("day", "model")
SCOPES = ("key", "tenant")


class UsageApi:
    def __init__(self, store: SqlLedgerStore, currency: Callable[[], str | None]) -> None:
        self.store = store
        self.currency = currency

    async def own(self, request: Request) -> Response:
        return self._listing(await self.store.report(_own_query(request)))

    async def own_export(self, request: Request) -> Response:
        return self._csv(await self.store.report(_own_query(request)))

    async def admin(self, request: Request) -> Response:
        return self._listing(await self.store.report(_admin_query(request)))

    async def admin_export(self, request: Request) -> Response:
        return self._csv(await self.store.report(_admin_query(request)))

    def _priced(self, report: Report) -> list[dict[str, object]]:
        currency = self.currency()
        return [
            {**row, "cost": format_money(row["cost_micros"]), "currency": currency}
            for row in report.rows
        ]

    def _listing(self, report: Report) -> Response:
        rows = self._priced(report)
        body = orjson.dumps({"object": "list", "data": rows, "has_more": report.has_more})
        return Response(body, media_type="application/json")

    def _csv(self, report: Report) -> Response:
        """The groups as CSV: the group columns, then the totals, then ``cost`` and
        ``currency``; a cut report (``has_more``) says so in a header, not in a row that
        would be summed."""
        rows = self._priced(report)
        out = io.StringIO()
        groups = [name for name in (rows[0] if rows else {}) if name not in _TOTAL_COLUMNS]
        writer = csv.DictWriter(out, [*groups, *_TOTAL_COLUMNS], lineterminator="\n")
        writer.writeheader()
        writer.writerows(rows)
        headers = {"x-usage-has-more": "true" if report.has_more else "false"}
        return Response(out.getvalue(), media_type="text/csv; charset=utf-8", headers=headers)


_TOTAL_COLUMNS = (*TOTALS, "cost", "currency")


def _own_query(request: Request) -> UsageQuery:
    """Without authentication there is one caller: the report covers every request."""
    principal = request.scope.get(PRINCIPAL_KEY)
    scope = request.query_params.get("scope", "key")
    if scope not in SCOPES:
        raise InvalidParameter("scope must be `key` or `tenant`.", param="scope")
    start, end = _time_range(request)
    tenant_id = key_id = None
    if principal is not None:
        tenant_id = principal.tenant_id
        key_id = None if scope == "tenant" else principal.key_id
    return UsageQuery(
        group_by=_groups(request, OWN_GROUPS, DEFAULT_OWN_GROUPS),
        tenant_id=tenant_id,
        key_id=key_id,
        start=start,
        end=end,
    )


def _admin_query(request: Request) -> UsageQuery:
    params = request.query_params
    start, end = _time_range(request)
    return UsageQuery(
        group_by=_groups(request, ADMIN_GROUPS, DEFAULT_ADMIN_GROUPS),
        tenant_id=params.get("tenant_id"),
        key_id=params.get("key_id"),
        model=params.get("model"),
        start=start,
        end=end,
    )


def usage_routes(
    store: SqlLedgerStore, *, admin: bool, currency: Callable[[], str | None] = lambda: None
) -> list[BaseRoute]:
    """``/v1/usage`` always; ``/admin/usage`` only where admin keys guard ``/admin/``; each with
    its CSV export. ``currency``: the prices' currency now (it follows a reload)."""
    api = UsageApi(store, currency)
    routes: list[BaseRoute] = [
        Route("/v1/usage", api.own, methods=["GET"]),
        Route("/v1/usage/export", api.own_export, methods=["GET"]),
    ]
    if admin:
        routes += [
            Route("/admin/usage", api.admin, methods=["GET"]),
            Route("/admin/usage/export", api.admin_export, methods=["GET"]),
        ]
    return routes


def _groups(
    request: Request, allowed: tuple[str, ...], default: tuple[str, ...]
) -> tuple[str, ...]:
    asked = request.query_params.get("group_by", "").split(",")
    groups = tuple(dict.fromkeys(g for g in asked if g))
    unknown = [g for g in groups if g not in allowed]
    if unknown:
        shown = ", ".join(g[:40] for g in unknown[:5])
        raise InvalidParameter(
            f"group_by: unknown {shown} (use {', '.join(allowed)})", param="group_by"
        )
    return groups or default


def _time_range(request: Request) -> tuple[float | None, float | None]:
    return _seconds(request, "start_time"), _seconds(request, "end_time")


def _seconds(request: Request, name: str) -> float | None:
    value = request.query_params.get(name)
    if value is None:
        return None
    try:
        seconds = float(value)
    except ValueError:
        seconds = float("nan")
    if not 0 <= seconds < 1e11:  # NaN and infinities fail too
        raise InvalidParameter(f"{name} must be UNIX seconds, got {value[:40]!r}", param=name)
    return seconds
