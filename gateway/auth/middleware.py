"""Deny by default: every request needs a key except on the few public paths listed here.

Pure ASGI, installed inside the request-id middleware. ``/admin/`` takes admin keys only; every
other path takes tenant keys and hands the authenticated Principal down with the request (the
authenticate stage's value, under ``PRINCIPAL_KEY`` in the scope). ``/metrics`` holds every
tenant's series: it takes an admin key or the scrape credential (``auth.metrics_token``); with
``auth.public_metrics: true`` a caller without a credential is served too, marked in the scope
(``PUBLIC_VIEW_KEY``) so that the tenant series are left out. Paths are matched as the router
matches them (``root_path`` stripped).
A refusal is rendered here: exception handlers only see errors raised inside the routes.
"""

from __future__ import annotations

import hmac

from starlette.middleware import Middleware
from starlette.types import ASGIApp

from gateway.asgi import Receive, Scope, Send, send_response
from gateway.auth.authenticator import Authenticator
from gateway.auth.config import AuthConfig
from gateway.auth.service import AuthService
from gateway.errors import GatewayError
from gateway.wire.outcome import PRINCIPAL_KEY

# The one list of paths served without a key. Liveness, readiness and the API description carry
# nothing about tenants. /metrics is not in this list: see MetricsAccess.
ALWAYS_PUBLIC = ("/healthz", "/readyz", "/openapi.json")
METRICS_PATH = "/metrics"
PUBLIC_VIEW_KEY = "gateway.public_view"
"""In the scope of a /metrics request served without a credential: no tenant series."""
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
    metrics = MetricsAccess.of(auth.config)
    return [
        Middleware(AuthMiddleware, authenticator=auth.authenticator, public=public, metrics=metrics)
    ]


def public_paths(config: AuthConfig, *, console: bool = False) -> frozenset[str]:
    """The paths served without a key (``/metrics`` is never one: see :class:`MetricsAccess`)."""
    return frozenset((*ALWAYS_PUBLIC, *(CONSOLE_PATHS if console else ())))


class MetricsAccess:
    """Who reads ``/metrics``: an admin key or the scrape token, whole; nobody else, unless
    ``public_metrics``, then without the tenant series."""

    __slots__ = ("public", "token")

    def __init__(self, token: bytes | None, *, public: bool) -> None:
        self.token, self.public = token, public

    @classmethod
    def of(cls, config: AuthConfig) -> MetricsAccess:
        token = config.metrics_token
        secret = None if token is None else token.get_secret_value().encode()
        return cls(secret, public=config.public_metrics)

    def admits(self, scope: Scope, token: str | None) -> bool:
        """Served without a key lookup: the scrape token, or no credential where public (then
        marked as the public view). Otherwise the caller needs an admin key."""
        if token is None:
            if self.public:
                scope[PUBLIC_VIEW_KEY] = True
            return self.public
        return self.token is not None and hmac.compare_digest(token.encode("latin-1"), self.token)


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
    def __init__(
        self,
        app: ASGIApp,
        *,
        authenticator: Authenticator,
        public: frozenset[str],
        metrics: MetricsAccess | None = None,
    ):
        self.app = app
        self.authenticator = authenticator
        self.public = public
        self.metrics = metrics or MetricsAccess(None, public=False)

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
        if path == METRICS_PATH and self.metrics.admits(scope, token):
            await self.app(scope, receive, send)
            return
        try:
            # Every tenant's series are in /metrics: for a key, it is an admin route.
            if path.startswith(ADMIN_PREFIX) or path == METRICS_PATH:
                await self.authenticator.admin(token)
            else:
                scope[PRINCIPAL_KEY] = await self.authenticator.tenant(token)
        except GatewayError as err:
            await send_response(send, err.status, err.body())
            return
        await self.app(scope, receive, send)
