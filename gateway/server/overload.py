"""A cap on requests served at once, answered with a clear 503 before any work is done.

Pure ASGI, outermost: a request over the cap costs one counter check and a small answer. The
probes stay outside the cap, so an overloaded replica is not restarted by its liveness probe.

    InFlightLimit(app, limit=1024)   # applied by create_app, outside everything else
"""

from __future__ import annotations

import os

from starlette.types import ASGIApp

from gateway.asgi import Receive, Scope, Send, send_response

OVERLOADED = (
    b'{"error":{"message":"The gateway is serving too many requests; retry shortly.",'
    b'"type":"server_error","param":null,"code":"server_overloaded"}}'
)
EXEMPT = frozenset(("/healthz", "/readyz", "/metrics"))


class InFlightLimit:
    def __init__(self, app: ASGIApp, *, limit: int) -> None:
        self.app = app
        self.limit = limit
        self.in_flight = 0
        self.refused = 0

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["path"] in EXEMPT:
            await self.app(scope, receive, send)
            return
        if self.in_flight >= self.limit:
            self.refused += 1
            extra = [(b"retry-after", b"1"), (b"x-request-id", os.urandom(12).hex().encode())]
            await send_response(send, 503, OVERLOADED, extra_headers=extra)
            return
        self.in_flight += 1
        try:
            await self.app(scope, receive, send)
        finally:
            self.in_flight -= 1
