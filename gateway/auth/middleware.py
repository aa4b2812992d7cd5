"""Deny by default: every request needs a key except on the few public paths listed here.

Pure ASGI, installed inside the request-id middleware. ``/admin/`` takes admin keys only; every
other path takes tenant keys and hands the authenticated Principal down with the request (the
authenticate stage's value, under ``PRINCIPAL_KEY`` in the scope). ``/metrics``, when not public
(``auth.public_metrics: false``), takes admin keys too: it holds every tenant's series. Paths are
matched as the router matches them (``root_path`` stripped).
A refusal is rendered here: exception handlers only see errors raised inside the routes.
"""

from __future__ import annotations

from starlette.middleware import Middleware
from starlette.types import ASGIApp

from gateway.asgi import Receive, Scope, Send, send_response
from gateway.auth.authenticator import Authenticator
from gateway.auth.config import AuthConfig
from gateway.auth.service import AuthService
from gateway.errors import GatewayError
from gateway.wire.outcome import PRINCIPAL_KEY

# The one list of paths served without a key. Liveness, readiness and the API description carry
# nothing about tenants; /metrics is public unless auth.public_metrics is false.
ALWAYS_PUBLIC = ("/healthz", "/readyz", "/openapi.json")
METRICS_PATH = "/metrics"
# The web console's static files, when ``console.enabled``: exact paths, no prefix, so nothing
# else under /console can ever be reached without a key. The page holds no data; every figure
# it shows comes from the JSON API, called with the key the user signs in with.
CONSOLE_FILES = ("console.css", "console.js")
CONSOLE_PATHS = ("/console", "/console/", *(f"/console/{name}" for name in CONSOLE_FILES))
ADMIN_PREFIX = "/admin/"

_BEARER = b"bearer "


def auth_middleware(auth: AuthService | None, *, console: bool = False) -> list[Middleware]:
    """The middleware to install (none when authentication is off)."""
    if auth is None:
        return []
    public = public_paths(auth.config, console=console)
    return [Middleware(AuthMiddleware, authenticator=auth.authenticator, public=public)]


def public_paths(config: AuthConfig, *, console: bool = False) -> frozenset[str]:
    return frozenset(
        (
            *ALWAYS_PUBLIC,
            *((METRICS_PATH,) if config.public_metrics else ()),
            *(CONSOLE_PATHS if console else ()),
        )
    )


def route_path(scope: Scope) -> str:
    """The path the router matches: ``root_path`` stripped as Starlette's routing strips it, so
    ``/prefix/admin/...`` under ``root_path=/prefix`` is an admin path here too."""
    path: str = scope.get("path", "")
    root: str = scope.get("root_path", "")
    if root and path.startswith(root):
        return path[len(root) :] or "/"
    return path


def presented_token(scope: Scope) -> str | None:
    """The key from ``Authorization: Bearer <key>`` or, failing that, ``api-key: <key>``."""
    api_key: bytes | None = None
    for name, value in scope["headers"]:
        if name == b"authorization":
            if value[:7].lower() == _BEARER:
                return value[7:].strip().decode("latin-1")  # type: ignore[no-any-return]
        elif name == b"api-key":
            api_key = value
    return None if api_key is None else api_key.strip().decode("latin-1")


class AuthMiddleware:
    def __init__(self, app: ASGIApp, *, authenticator: Authenticator, public: frozenset[str]):
        self.app = app
        self.authenticator = authenticator
        self.public = public

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await self.app(scope, receive, send)
            return
        path = route_path(scope)
        if scope["type"] == "http" and path in self.public:
            await self.app(scope, receive, send)
            return
        if scope["type"] != "http":  # no websocket route takes keys: refuse, do not pass
            await send({"type": "websocket.close", "code": 1008})
            return
        token = presented_token(scope)
        try:
            # Every tenant's series are in /metrics: when not public, it is an admin route.
            if path.startswith(ADMIN_PREFIX) or path == METRICS_PATH:
                await self.authenticator.admin(token)
            else:
                scope[PRINCIPAL_KEY] = await self.authenticator.tenant(token)
        except GatewayError as err:
            await send_response(send, err.status, err.body())
            return
        await self.app(scope, receive, send)
