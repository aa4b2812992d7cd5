"""The auth middleware at the ASGI level, around a real authenticator and store."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from gateway.auth.authenticator import Authenticator
from gateway.auth.config import AuthConfig
from gateway.auth.keys import KeyHasher
from gateway.auth.manage import KeyManager, KeySpec, TenantSpec
from gateway.auth.middleware import PUBLIC_VIEW_KEY, AuthMiddleware, MetricsAccess, public_paths
from gateway.auth.store import AuthStore
from gateway.database import Database
from gateway.wire.outcome import PRINCIPAL_KEY

HASHER = KeyHasher(b"unit-test-hash-secret")


class Inner:
    """The app behind the middleware: records the scopes that reached it."""

    def __init__(self) -> None:
        self.seen: list[dict[str, Any]] = []

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        self.seen.append(scope)


class Sent:
    def __init__(self) -> None:
        self.messages: list[dict[str, Any]] = []

    async def __call__(self, message: Any) -> None:
        self.messages.append(message)


@pytest.fixture
async def setup(migrated: Database) -> tuple[AuthMiddleware, Inner, str, str]:
    store = AuthStore(migrated)
    manager = KeyManager(store, HASHER)
    await manager.create_tenant(TenantSpec(id="acme"))
    token = (await manager.create_key("acme", KeySpec(name="k"))).token
    admin = (await manager.create_admin_key("ops")).token
    inner = Inner()
    auth = Authenticator(store, HASHER, AuthConfig())
    middleware = AuthMiddleware(inner, authenticator=auth, public=public_paths(AuthConfig()))
    return middleware, inner, token, admin


def _http(path: str, *headers: tuple[bytes, bytes]) -> dict[str, Any]:
    return {
        "type": "http",
        "path": path,
        "headers": list(headers),
    }


async def test_a_valid_key_reaches_the_app_with_its_principal(setup: Any) -> None:
    middleware, inner, token, _ = setup
    scope = _http("/v1/chat/completions", (b"authorization", f"Bearer {token}".encode()))
    await middleware(scope, None, Sent())
    principal = scope[PRINCIPAL_KEY]
    assert inner.seen == [scope]
    assert principal.tenant_id == "acme"
    assert principal.key_id == token.split("-")[2]


async def test_refusals_are_rendered_here_and_stop_the_request(setup: Any) -> None:
    middleware, inner, token, admin = setup
    cases = [
        (_http("/v1/models"), 401, "invalid_api_key"),
        (_http("/nowhere", (b"api-key", b"sk-wrong")), 401, "invalid_api_key"),
        (_http("/admin/keys", (b"api-key", token.encode())), 403, "permission_denied"),
        (_http("/v1/models", (b"api-key", admin.encode())), 401, "invalid_api_key"),
    ]
    for scope, status, code in cases:
        sent = Sent()
        await middleware(scope, None, sent)
        assert sent.messages[0]["status"] == status
        assert orjson.loads(sent.messages[1]["body"])["error"]["code"] == code
        assert PRINCIPAL_KEY not in scope
    assert inner.seen == []


async def test_admin_keys_open_admin_routes(setup: Any) -> None:
    middleware, inner, _, admin = setup
    scope = _http("/admin/tenants", (b"authorization", f"Bearer {admin}".encode()))
    await middleware(scope, None, Sent())
    assert inner.seen == [scope]
    assert PRINCIPAL_KEY not in scope  # an admin key is no tenant principal


async def test_public_paths_and_lifespan_pass_websockets_do_not(setup: Any) -> None:
    middleware, inner, _, _ = setup
    for path in ("/healthz", "/readyz", "/openapi.json"):
        await middleware(_http(path), None, Sent())
    await middleware({"type": "lifespan"}, None, Sent())
    assert len(inner.seen) == 4
    sent = Sent()
    await middleware({"type": "websocket", "path": "/healthz", "headers": []}, None, sent)
    assert sent.messages == [{"type": "websocket.close", "code": 1008}]
    assert len(inner.seen) == 4


SCRAPE_TOKEN = "scrape-token-0123456789abcdef"


def metrics_middleware(base: AuthMiddleware, inner: Inner, **config: Any) -> AuthMiddleware:
    access = MetricsAccess.of(AuthConfig(**config))
    return AuthMiddleware(
        inner, authenticator=base.authenticator, public=base.public, metrics=access
    )


def bearer(token: str) -> tuple[bytes, bytes]:
    return (b"authorization", f"Bearer {token}".encode())


async def test_metrics_take_admin_keys_or_the_scrape_token_only(setup: Any) -> None:
    base, inner, tenant, admin = setup
    private = metrics_middleware(base, inner, metrics_token=SCRAPE_TOKEN)
    for headers, status in [
        ((), 401),
        ((bearer(tenant),), 403),
        ((bearer(SCRAPE_TOKEN + "x"),), 401),
        ((bearer(SCRAPE_TOKEN),), None),
        ((bearer(admin),), None),
    ]:
        sent = Sent()
        scope = _http("/metrics", *headers)
        await private(scope, None, sent)
        assert (sent.messages[0]["status"] if sent.messages else None) == status, headers
        assert PUBLIC_VIEW_KEY not in scope
    assert len(inner.seen) == 2
    # The scrape token opens /metrics and nothing else.
    sent = Sent()
    await private(_http("/admin/tenants", bearer(SCRAPE_TOKEN)), None, sent)
    await private(_http("/v1/models", bearer(SCRAPE_TOKEN)), None, sent)
    assert [m["status"] for m in sent.messages[::2]] == [401, 401] and len(inner.seen) == 2


async def test_public_metrics_are_marked_as_the_public_view(setup: Any) -> None:
    base, inner, _, admin = setup
    public = metrics_middleware(base, inner, public_metrics=True)
    anonymous, with_key = _http("/metrics"), _http("/metrics", bearer(admin))
    await public(anonymous, None, Sent())
    await public(with_key, None, Sent())
    assert inner.seen == [anonymous, with_key]
    assert anonymous[PUBLIC_VIEW_KEY] is True and PUBLIC_VIEW_KEY not in with_key


async def test_root_path_is_stripped_as_the_router_strips_it(setup: Any) -> None:
    middleware, inner, tenant, _ = setup
    scope = _http("/gw/admin/tenants", (b"authorization", f"Bearer {tenant}".encode()))
    scope["root_path"] = "/gw"
    sent = Sent()
    await middleware(scope, None, sent)
    assert sent.messages[0]["status"] == 403  # an admin route: a tenant key may not pass
    public = _http("/gw/healthz")
    public["root_path"] = "/gw"
    await middleware(public, None, Sent())
    assert inner.seen == [public]
