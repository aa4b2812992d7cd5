"""The outermost pure-ASGI layer: request ids, the access log and per-request metrics.

Pure ASGI rather than ``BaseHTTPMiddleware``, which buffers responses and slows streams.
"""

from __future__ import annotations

import os
import re
import time

from starlette.types import ASGIApp

from gateway.accesslog import AccessLog
from gateway.asgi import Message, Receive, Scope, Send
from gateway.context import SCOPE_KEY, RequestContext
from gateway.metrics import GatewayMetrics
from gateway.routing.service import routing_headers

REQUEST_ID_HEADER = b"x-request-id"
_VALID_REQUEST_ID = re.compile(rb"[A-Za-z0-9._:\-]{1,128}")


def request_id_from(scope: Scope) -> str:
    """Honour a well-formed incoming ``x-request-id``; otherwise make one."""
    for key, value in scope["headers"]:
        if key == REQUEST_ID_HEADER:
            if _VALID_REQUEST_ID.fullmatch(value):
                return value.decode()  # type: ignore[no-any-return]
            break
    return os.urandom(12).hex()


class RequestIdMiddleware:
    def __init__(
        self, app: ASGIApp, *, metrics: GatewayMetrics, access_log: AccessLog | None
    ) -> None:
        self.app = app
        self.metrics = metrics
        self.access_log = access_log

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        ctx = RequestContext(request_id=request_id_from(scope), started=time.perf_counter())
        scope[SCOPE_KEY] = ctx
        id_header = (REQUEST_ID_HEADER, ctx.request_id.encode())

        async def send_with_id(message: Message) -> None:
            if message["type"] == "http.response.start":
                if ctx.response_headers:  # the rate-limit quotas, on errors as on answers
                    message["headers"] = [*message.get("headers", ()), *ctx.response_headers]
                ctx.status = message["status"]
                message["headers"] = [*message.get("headers", ()), id_header, *routing_headers(ctx)]
            await send(message)

        self.metrics.requests_in_flight += 1
        try:
            await self.app(scope, receive, send_with_id)
        finally:
            self.metrics.requests_in_flight -= 1
            self._finish(scope, ctx)

    def _finish(self, scope: Scope, ctx: RequestContext) -> None:
        elapsed = time.perf_counter() - ctx.started
        if ctx.model is not None:
            model, pool = ctx.model, ctx.pool or ""
            self.metrics.requests_by(model, pool, ctx.variant or "", str(ctx.status)).inc()
            self.metrics.duration_by(model, pool).observe(elapsed)
            status_class = f"{ctx.status // 100}xx"
            self.metrics.tenant_requests_by(ctx.tenant_id or "", status_class).inc()
        if self.access_log is not None:
            self.access_log.write(
                {
                    "msg": "request",
                    "request_id": ctx.request_id,
                    "method": scope["method"],
                    "path": scope["path"],
                    "status": ctx.status,
                    "latency_ms": round(elapsed * 1000, 3),
                    "model": ctx.model,
                    "pool": ctx.pool,
                    "replica": ctx.replica,
                    "stream": ctx.stream,
                    "ttfb_ms": None
                    if ctx.time_to_first_byte is None
                    else round(ctx.time_to_first_byte * 1000, 3),
                    "error_code": ctx.error_code,
                    "client_disconnected": ctx.client_disconnected or None,
                    "variant": ctx.variant,
                    "routing_reason": ctx.routing_reason,
                    "prompt_tokens": ctx.prompt_tokens,
                    "trace_id": ctx.trace_id,
                }
            )
