"""The gateway's own small endpoints: model listing, liveness, readiness, metrics, OpenAPI."""

from __future__ import annotations

from typing import Any

import orjson

from gateway.asgi import Receive, Scope, Send, send_response
from gateway.auth.access import may_see
from gateway.errors import ModelNotFound
from gateway.openapi import openapi_document
from gateway.runtime.state import GatewayState
from gateway.runtime.table import ModelRoute, publish_pool_state
from gateway.wire.outcome import PRINCIPAL_KEY


def _model_entry(route: ModelRoute, created: int) -> dict[str, Any]:
    return {"id": route.name, "object": "model", "created": created, "owned_by": route.owned_by}


class ListModels:
    def __init__(self, state: GatewayState) -> None:
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
    def __init__(self, state: GatewayState) -> None:
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
    """Readiness: every model has a healthy upstream replica, and the rate limiter's store
    answers (or its policy is to fail open). Public, so it names no replica (URLs may carry
    credentials) and no failure reason: those are in the admin view ``GET /admin/routing``."""

    def __init__(self, state: GatewayState) -> None:
        self.state = state

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        table = self.state.table
        unready = sorted(m.name for m in table.models.values() if not m.router.healthy)
        limiter = await self.state.accounting.limiter.readiness()
        ready = not unready and limiter["ready"]
        body = {
            "status": "ready" if ready else "not ready",
            "unready_models": unready,
            "rate_limiter": {"reachable": limiter["reachable"], "ready": limiter["ready"]},
        }
        await send_response(send, 200 if ready else 503, orjson.dumps(body))


class Metrics:
    def __init__(self, state: GatewayState) -> None:
        self.state = state

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        state = self.state
        metrics = state.metrics
        publish_pool_state(metrics, state.routing_metrics, state.table.pools.values())
        if state.flow is not None:
            state.flow.publish()
        await send_response(send, 200, metrics.render(), metrics.content_type.encode())


class OpenAPI:
    def __init__(self) -> None:
        self.body = orjson.dumps(openapi_document())

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await send_response(send, 200, self.body)
