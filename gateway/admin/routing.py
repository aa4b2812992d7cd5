"""Routing's part of the admin API (admin keys only, like everything under ``/admin/``).

GET  /admin/routing                                      variants (weights, recent error rate and
                                                         p95 TTFT, rollbacks), canary, pools
POST /admin/routing/reload                               re-read the config file (as SIGHUP)
PUT  /admin/routing/models/{model}/variants/{variant}    {"weight": 10}: also lifts a rollback
     (re-enabling: logged, counted in gateway_canary_reenables_total, shown under ``reenabled``;
     with the Redis backend it reaches every replica, like the rollback itself)
"""

from __future__ import annotations

from typing import Any, Protocol

import orjson
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

from configkit import ConfigError
from gateway.errors import InvalidJSON, InvalidParameter, InvalidRequest, ModelNotFound
from gateway.flow.gate import FlowGate
from gateway.routing.canary_judges import Canaries
from gateway.routing.router import ModelRouter, Variant
from gateway.runtime.reload import ConfigReloader
from gateway.runtime.table import RoutingTable, load_status, replica_status
from gateway.wire.outcome import PRINCIPAL_KEY


class AdminState(Protocol):
    """What routing's admin API reads: the table now, the canary judgements, flow control."""

    @property
    def table(self) -> RoutingTable: ...
    @property
    def canaries(self) -> Canaries: ...
    @property
    def flow(self) -> FlowGate | None: ...


def routing_admin_routes(state: AdminState, reloader: ConfigReloader | None) -> list[BaseRoute]:
    api = RoutingAdmin(state, reloader)
    return [
        Route("/admin/routing", api.show, methods=["GET"]),
        Route("/admin/routing/reload", api.reload, methods=["POST"]),
        Route("/admin/routing/models/{model}/variants/{variant}", api.set_weight, methods=["PUT"]),
    ]


class RoutingAdmin:
    def __init__(self, state: AdminState, reloader: ConfigReloader | None) -> None:
        self.state = state
        self.reloader = reloader

    async def show(self, request: Request) -> Response:
        table = self.state.table
        body = {
            "canary_judgement": self.state.canaries.describe(),
            "models": {name: _router_status(m.router) for name, m in table.models.items()},
            "pools": {
                name: {
                    **load_status(pool),
                    "replicas": [
                        {**replica_status(pool, r), "url": r.label} for r in pool.replicas
                    ],
                }
                for name, pool in table.pools.items()
            },
            "flow": {"enabled": False} if self.state.flow is None else self.state.flow.show(),
        }
        return _json(body)

    async def reload(self, request: Request) -> Response:
        if self.reloader is None:
            raise InvalidRequest("This gateway was not started from a config file.")
        try:
            config = await self.reloader.reload()
        except ConfigError as err:
            raise InvalidRequest(
                f"The new configuration was refused; the old one keeps serving: {err}",
                code="invalid_config",
            ) from None
        return _json({"status": "reloaded", "models": sorted(config.models)})

    async def set_weight(self, request: Request) -> Response:
        model = request.path_params["model"]
        route = self.state.table.models.get(model)
        if route is None:
            raise ModelNotFound(model)
        weight = _weight_from(await request.body())
        principal = request.scope.get(PRINCIPAL_KEY)
        by = principal.key_id if principal is not None else "admin"
        variant = request.path_params["variant"]
        await self.state.canaries.set_weight(route.router, variant, weight, by)
        return _json(_router_status(route.router))


def _weight_from(body: bytes) -> float:
    try:
        payload = orjson.loads(body)
    except orjson.JSONDecodeError:
        raise InvalidJSON('The body must be JSON: {"weight": N}.') from None
    weight = payload.get("weight") if isinstance(payload, dict) else None
    if isinstance(weight, bool) or not isinstance(weight, int | float) or weight < 0:
        raise InvalidParameter("`weight` must be a number of at least 0.", param="weight")
    return float(weight)


def _router_status(router: ModelRouter) -> dict[str, Any]:
    canary = router.canary
    return {
        "policy": router.policy.model_dump(),
        "canary": None if canary is None else canary.model_dump(),
        "variants": {v.name: _variant_status(router, v) for v in router.variants.values()},
    }


def _variant_status(router: ModelRouter, v: Variant) -> dict[str, Any]:
    window = router.window(v)
    last = v.rollback
    return {
        "weight": v.weight,
        "configured_weight": v.config.weight,
        "rolled_back": v.rolled_back,
        "rollback": None if last is None else {**last.show(), "applied_at": v.rollback_applied_at},
        "last_rollback": None if last is None else {"at": last.at, "reason": last.reason},
        "reenabled": None if v.reenabled is None else v.reenabled.show(),
        "pools": {role.value: pool.name for role, pool in v.by_role.items()},
        "window": {
            "requests": window.requests,
            "error_rate": window.error_rate,
            "ttft_p95_ms": None if window.ttft_p95 is None else window.ttft_p95 * 1000,
        },
    }


def _json(body: dict[str, Any]) -> Response:
    return Response(orjson.dumps(body), media_type="application/json")
