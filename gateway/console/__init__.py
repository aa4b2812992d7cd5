"""The web console: static HTML, CSS and JavaScript served at ``/console`` (no build step).

The files hold no data and no secret: the page asks for a key, keeps it in the tab's
``sessionStorage`` and calls the documented JSON API (``/v1/usage``, ``/v1/keys``, ``/admin/*``)
with it as a bearer header, so the console adds no private API and no cookie (no CSRF surface).
Only the exact paths in ``gateway.auth.middleware.CONSOLE_PATHS`` are served without a key.
"""

from gateway.console.static import console_routes

__all__ = ["console_routes"]
