"""The app factory: routes, middleware, error handlers and lifespan, composed in one place.

    app = create_app(load_config("gateway.yaml"))                 # what `pd-gateway run` serves
    app = create_app(config, upstream_factory=..., clock=clock)   # tests: the seams

Nothing happens at import time; every piece of state hangs off the app built here, and every
layer around the endpoints (request ids and the access log outermost, then the server's caps on
requests served and bodies arriving, the server span, auth) is applied here, so a test that
builds the app gets the one served.
"""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from pathlib import Path

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.middleware.errors import ServerErrorMiddleware
from starlette.middleware.exceptions import ExceptionMiddleware
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route
from starlette.types import ASGIApp, Receive, Scope, Send

from gateway import errors
from gateway.accesslog import AccessLog
from gateway.accounting.ledger_sql import SqlLedgerStore
from gateway.accounting.usage_api import usage_routes
from gateway.admin.api import REQUEST_MODELS, admin_routes, own_key_routes
from gateway.admin.budgets import REQUEST_MODELS as BUDGET_BODIES
from gateway.admin.budgets import budget_routes
from gateway.admin.prices import price_admin_routes
from gateway.admin.routing import routing_admin_routes
from gateway.auth.middleware import auth_middleware
from gateway.batch_runner import BatchRunner
from gateway.batches.api import batch_routes
from gateway.clock import SYSTEM_CLOCK, Clock
from gateway.config import GatewayConfig
from gateway.console import console_routes
from gateway.endpoints import Healthz, ListModels, Metrics, OpenAPI, Readyz, RetrieveModel
from gateway.middleware import RefusalLog, RequestIdMiddleware
from gateway.proxy.endpoint import ProxyEndpoint
from gateway.proxy.pipeline import Pipeline
from gateway.response_store.api import responses_routes
from gateway.routing.outcomes import to_pool_books
from gateway.runtime.reload import ConfigReloader, reload_on_sighup
from gateway.runtime.state import GatewayState, UpstreamFactory
from gateway.server.overload import InFlightLimit
from gateway.server.refusals import REFUSALS_KEY, RefusalRecorder
from gateway.telemetry.server import ServerSpanMiddleware
from gateway.upstream.http1 import Http1Upstream
from gateway.wire.request import Operation

_STATUS_ERRORS: dict[int, type[errors.GatewayError]] = {
    404: errors.NotFound,
    405: errors.MethodNotAllowed,
}


def create_app(
    config: GatewayConfig,
    *,
    upstream_factory: UpstreamFactory = Http1Upstream,
    config_path: Path | None = None,
    clock: Clock = SYSTEM_CLOCK,
) -> Starlette:
    """Build the gateway. ``upstream_factory`` makes the upstream client of each pool; with
    ``config_path`` (the file ``config`` came from) SIGHUP and the admin API reload it;
    ``clock`` is what every part that measures time reads (the limiter, the key cache, the
    canary judge, the breakers and retry budget, the ledger's timestamps)."""
    state = GatewayState.build(config, upstream_factory, clock)
    # The outcome feed's consumers (beside the ledger, metrics and canary the recorder feeds):
    # each pool's book of what its replicas delivered, which the scorers read.
    state.outcomes.subscribe(to_pool_books(lambda: state.table.pools))
    # The load book's subscribers: whenever a place frees (a give-back, a first token), flow
    # control's queue grants what now has room.
    if state.flow is not None:
        state.load.subscribe(state.flow.queue.pump)
    access_log = AccessLog(sys.stderr.fileno()) if config.server.access_log else None
    reloader = None if config_path is None else ConfigReloader(state, config_path)

    # The lifespan state reaches the edge protocol (gateway/server/refusals.py): what it refuses
    # before a request exists is counted and logged here.
    edge_state: dict[str, RefusalRecorder] = {REFUSALS_KEY: RefusalLog(state.metrics, access_log)}

    # The pipeline serves requests with no HTTP in them; each endpoint adapts ASGI to it, and
    # the batch runner feeds it batch lines.
    pipeline = Pipeline(state)
    runner = (
        BatchRunner(config.batches, state.batches.jobs, pipeline, state)
        if config.batches.enabled
        else None
    )

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[dict[str, RefusalRecorder]]:
        await state.start()
        if runner is not None:
            await runner.start()
        try:
            if reloader is None:
                yield edge_state
            else:
                with reload_on_sighup(reloader):
                    yield edge_state
        finally:
            if runner is not None:
                await runner.stop()  # before the store closes: its lines in flight put back
            await state.stop()
            if access_log is not None:
                access_log.close()

    proxies = {"/v1/" + op.value: ProxyEndpoint(op, pipeline) for op in Operation}
    routes: list[BaseRoute] = []  # described by the OpenAPI endpoint, which is one of them
    routes += [
        *(Route(path, endpoint, methods=["POST"]) for path, endpoint in proxies.items()),
        Route("/v1/models", ListModels(state), methods=["GET"]),
        Route("/v1/models/{model:path}", RetrieveModel(state), methods=["GET"]),
        Route("/healthz", Healthz(), methods=["GET"]),
        Route("/readyz", Readyz(state), methods=["GET"]),
        Route("/metrics", Metrics(state), methods=["GET"]),
        Route(
            "/openapi.json", OpenAPI(routes, {**REQUEST_MODELS, **BUDGET_BODIES}), methods=["GET"]
        ),
        *routing_admin_routes(state, reloader),
        # Before the /admin mount, which would otherwise answer /admin/usage with a 404.
        *usage_routes(
            SqlLedgerStore(state.database),
            admin=state.auth is not None,
            currency=lambda: state.accounting.prices.currency,
        ),
        *responses_routes(state.responses, admin=state.auth is not None),
        *batch_routes(state.batches if config.batches.enabled else None),
        *budget_routes(state.auth, state.accounting),  # before the /admin mount too
        *price_admin_routes(state, state.auth),  # before the /admin mount, as usage is
        *admin_routes(state.auth, lambda: state.accounting.prices.currency),
        *own_key_routes(state.auth),
        *console_routes(enabled=config.console.enabled),
    ]
    app = GatewayApp(
        proxies,
        routes=routes,
        middleware=[
            Middleware(
                RequestIdMiddleware, metrics=state.metrics, access_log=access_log, clock=clock
            ),
            # The server's caps: a refusal has its ids and access-log line, and costs no stage.
            Middleware(
                InFlightLimit,
                limit=config.server.max_requests_in_flight,
                max_uploads=config.server.max_uploads,
                max_uploads_per_client=config.server.max_uploads_per_client,
                upload_grace=config.server.upload_grace,
                max_body_bytes=config.server.max_body_bytes,
                metrics=state.metrics,
            ),
            # Only when traces are exported: even the no-op tracer's span costs (README,
            # Performance).
            *(
                [
                    Middleware(
                        ServerSpanMiddleware,
                        tracing=state.tracing,
                        traced_paths=["/v1/" + op.value for op in Operation],
                    )
                ]
                if state.tracing.provider is not None
                else []
            ),
            # Deny by default; inside the span and access log.
            *auth_middleware(state.auth, console=config.console.enabled),
        ],
        # An unexpected exception is answered by RequestIdMiddleware (with the request's ids).
        exception_handlers={
            errors.GatewayError: _render_gateway_error,
            HTTPException: _render_http_exception,
        },
        lifespan=lifespan,
    )
    app.state.gateway = state
    app.state.pipeline = pipeline  # the entry point for requests that do not come over HTTP
    app.state.batch_runner = runner
    return app


class GatewayApp(Starlette):
    """Starlette, with the proxy endpoints reached in one step.

    A ``POST`` to a proxy path goes through the gateway's own middleware (request ids and the access
    log, the server span, auth) straight to its :class:`ProxyEndpoint`, skipping Starlette's outer
    error layer, its exception layer and the router's regex scan of every route, and a send wrapper
    each per streamed event (the cost measured: README, Performance). None of them can act on these
    paths, whose endpoint answers its own errors and whose unexpected exceptions RequestIdMiddleware
    answers.
    Everything else (other paths, other methods, the lifespan) takes Starlette's full stack,
    so 404, 405 and the admin API are unchanged.
    """

    def __init__(self, proxies: Mapping[str, ASGIApp], **kwargs: object) -> None:
        self.proxies = proxies
        super().__init__(**kwargs)  # type: ignore[arg-type]

    def build_middleware_stack(self) -> ASGIApp:
        handlers = {k: v for k, v in self.exception_handlers.items() if k not in (500, Exception)}
        error_handler = self.exception_handlers.get(500) or self.exception_handlers.get(Exception)
        rest = ExceptionMiddleware(self.router, handlers=handlers, debug=self.debug)
        inner: ASGIApp = _ProxyPaths(self.proxies, rest)
        for cls, args, kwargs in reversed(self.user_middleware):
            inner = cls(inner, *args, **kwargs)
        return _ProxyPaths(
            self.proxies,
            ServerErrorMiddleware(inner, handler=error_handler, debug=self.debug),
            proxied=inner,
        )


class _ProxyPaths:
    """``POST`` to a proxy path: to ``proxied`` (default: the path's endpoint); else ``rest``."""

    __slots__ = ("proxied", "proxies", "rest")

    def __init__(
        self, proxies: Mapping[str, ASGIApp], rest: ASGIApp, proxied: ASGIApp | None = None
    ) -> None:
        self.proxies, self.rest, self.proxied = proxies, rest, proxied

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["method"] == "POST":
            endpoint = self.proxies.get(scope["path"])
            if endpoint is not None:
                await (self.proxied or endpoint)(scope, receive, send)
                return
        await self.rest(scope, receive, send)


def _error_response(err: errors.GatewayError) -> Response:
    return Response(
        err.body(), err.status, headers=dict(err.headers), media_type="application/json"
    )


async def _render_gateway_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, errors.GatewayError)
    return _error_response(exc)


async def _render_http_exception(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)
    cls = _STATUS_ERRORS.get(exc.status_code, errors.InvalidRequest)
    message = (
        f"{request.method} {request.url.path} is not allowed here."
        if exc.status_code == 405
        else f"No route for {request.method} {request.url.path}."
    )
    err = cls(message, headers=exc.headers)
    return _error_response(err)
