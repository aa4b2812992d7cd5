"""The gateway's own small endpoints: model listing, liveness, readiness, metrics, OpenAPI."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Protocol

import orjson
from pydantic import BaseModel
from starlette.routing import BaseRoute

from gateway.accounting.stage import Accounting
from gateway.asgi import Receive, Scope, Send, send_response
from gateway.auth.access import may_see
from gateway.auth.middleware import PUBLIC_VIEW_KEY
from gateway.errors import ModelNotFound
from gateway.flow.gate import FlowGate
from gateway.metrics import GatewayMetrics
from gateway.openapi import openapi_document
from gateway.routing.metrics import RoutingMetrics
from gateway.runtime.table import ModelRoute, RoutingTable, publish_pool_state
from gateway.server.loop_watch import LoopWatch
from gateway.wire.outcome import PRINCIPAL_KEY


def _model_entry(route: ModelRoute, created: int) -> dict[str, Any]:
    return {"id": route.name, "object": "model", "created": created, "owned_by": route.owned_by}


class Catalog(Protocol):
    """What the model endpoints read: the models now, and when the gateway started."""

    @property
    def table(self) -> RoutingTable: ...
    @property
    def started_at(self) -> int: ...


class Readiness(Protocol):
    @property
    def table(self) -> RoutingTable: ...
    @property
    def accounting(self) -> Accounting: ...
    @property
    def loop_watch(self) -> LoopWatch: ...


class Exposition(Protocol):
    """What ``/metrics`` reads: both metric sets, the pools to publish, flow control's queue."""

    @property
    def metrics(self) -> GatewayMetrics: ...
    @property
    def routing_metrics(self) -> RoutingMetrics: ...
    @property
    def table(self) -> RoutingTable: ...
    @property
    def flow(self) -> FlowGate | None: ...


class ListModels:
    def __init__(self, state: Catalog) -> None:
        self.state = state

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        created, principal = self.state.started_at, scope.get(PRINCIPAL_KEY)
        data = [
            _model_entry(r, created)
            for r in self.state.table.models.values()
            if may_see(principal, r.name)
        ]
        await send_response(send, 200, orjson.dumps({"object": "list", "data": data}))


class RetrieveModel:
    def __init__(self, state: Catalog) -> None:
        self.state = state

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        name = scope["path_params"]["model"]
        route = self.state.table.models.get(name)
        if route is None or not may_see(scope.get(PRINCIPAL_KEY), name):
            raise ModelNotFound(name)
        await send_response(send, 200, orjson.dumps(_model_entry(route, self.state.started_at)))


class Healthz:
    """Liveness: the process serves HTTP. Says nothing about upstreams."""

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await send_response(send, 200, b'{"status":"ok"}')


class Readyz:
    """Readiness: every model has a healthy upstream replica, the rate limiter's store answers
    (or its policy is to fail open), and, where ``server.loop_lag_unready_seconds`` is set, the
    event loop has not been stuck past it lately (gateway/server/loop_watch.py). Public, so it
    names no replica (URLs may carry credentials) and no failure reason: those are in the admin
    view ``GET /admin/routing``."""

    def __init__(self, state: Readiness) -> None:
        self.state = state

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        table = self.state.table
        unready = sorted(m.name for m in table.models.values() if not m.router.healthy)
        limiter = await self.state.accounting.limiter.readiness()
        loop_ready = self.state.loop_watch.ready()
        ready = not unready and limiter["ready"] and loop_ready
        body = {
            "status": "ready" if ready else "not ready",
            "unready_models": unready,
            "rate_limiter": {"reachable": limiter["reachable"], "ready": limiter["ready"]},
            "event_loop": {"ready": loop_ready},
        }
        await send_response(send, 200 if ready else 503, orjson.dumps(body))


class Metrics:
    def __init__(self, state: Exposition) -> None:
        self.state = state

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        state = self.state
        metrics = state.metrics
        publish_pool_state(metrics, state.routing_metrics, state.table.pools.values())
        if state.flow is not None:
            state.flow.publish()
        body = metrics.render(tenants=PUBLIC_VIEW_KEY not in scope)
        await send_response(send, 200, body, metrics.content_type.encode())


class OpenAPI:
    """The document of the routes served (gateway/openapi.py), made at the first request: the
    route table holds this endpoint too, so it is complete only once the app is built."""

    def __init__(
        self,
        routes: Sequence[BaseRoute],
        bodies: Mapping[tuple[str, str], type[BaseModel]],
    ) -> None:
        self.routes, self.bodies = routes, bodies
        self.body: bytes | None = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if self.body is None:
            self.body = orjson.dumps(openapi_document(self.routes, self.bodies))
        await send_response(send, 200, self.body)
