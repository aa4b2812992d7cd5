"""Serve the console's files from the package, read once when the app is built.

routes = console_routes(enabled=config.console.enabled)
"""

from __future__ import annotations

from importlib import resources

from starlette.routing import BaseRoute, Route

from gateway.asgi import Receive, Scope, Send, send_response
from gateway.auth.middleware import CONSOLE_FILES

_TYPES = {
    "html": b"text/html; charset=utf-8",
    "css": b"text/css; charset=utf-8",
    "js": b"text/javascript; charset=utf-8",
}

# Scripts and styles from this origin only (no inline script, no CDN), data only from this
# origin's API, never framed: a page that holds a key in sessionStorage must not run foreign code.
SECURITY_HEADERS = (
    (
        b"content-security-policy",
        b"default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
        b"connect-src 'self'; form-action 'none'; frame-ancestors 'none'; base-uri 'none'",
    ),
    (b"x-content-type-options", b"nosniff"),
    (b"referrer-policy", b"no-referrer"),
    (b"cache-control", b"no-cache"),
)


class StaticFile:
    """One file, held in memory (three small files; no disk read per request)."""

    def __init__(self, name: str) -> None:
        self.body = resources.files("gateway.console").joinpath("static", name).read_bytes()
        self.content_type = _TYPES[name.rsplit(".", 1)[1]]

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await send_response(send, 200, self.body, self.content_type, SECURITY_HEADERS)


def console_routes(*, enabled: bool) -> list[BaseRoute]:
    """``/console`` and ``/console/`` (the page) and its files; nothing when disabled."""
    if not enabled:
        return []
    page = StaticFile("index.html")
    return [
        # Static files of a web page, not the API: left out of the OpenAPI document.
        Route("/console", page, methods=["GET"], include_in_schema=False),
        Route("/console/", page, methods=["GET"], include_in_schema=False),
        *(
            Route(f"/console/{name}", StaticFile(name), methods=["GET"], include_in_schema=False)
            for name in CONSOLE_FILES
        ),
    ]
