"""The OpenAPI document is generated from the route table: every route served is described,
and nothing else is; the admin bodies are their pydantic models' schemas."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest
from starlette.routing import Route

from gateway.app import create_app
from gateway.auth.manage import KeySpec
from gateway.openapi import UndescribedRoute, openapi_document, served
from tests.seam.harness import gateway_config

EVERYTHING_ON: dict[str, Any] = {
    "auth": {"enabled": True, "hash_secret": "openapi-test-hash-secret-0123456789"},
    "console": {"enabled": True},
}


async def test_every_route_served_is_described_and_nothing_else(tmp_path: Path) -> None:
    app = create_app(gateway_config(tmp_path, **EVERYTHING_ON))
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://gw") as client:
        document = (await client.get("/openapi.json")).json()
    routes = set(served(app.routes))
    described = {
        (method.upper(), path) for path, item in document["paths"].items() for method in item
    }
    assert described == routes
    for path in ("/metrics", "/openapi.json", "/admin/keys", "/admin/routing/reload"):
        assert path in document["paths"], path
    assert not any(path.startswith("/console") for path in document["paths"])


def test_a_route_without_a_description_is_an_error() -> None:
    async def endpoint(scope: Any, receive: Any, send: Any) -> None: ...

    with pytest.raises(UndescribedRoute, match="GET /v1/new-thing"):
        openapi_document([Route("/v1/new-thing", endpoint, methods=["GET"])])


def test_admin_bodies_are_described_by_their_models() -> None:
    document = openapi_document(bodies={("POST", "/admin/tenants/{tenant}/keys"): KeySpec})
    body = document["paths"]["/admin/tenants/{tenant}/keys"]["post"]["requestBody"]
    assert body["content"]["application/json"]["schema"] == {"$ref": "#/components/schemas/KeySpec"}
    schema = document["components"]["schemas"]["KeySpec"]
    assert schema["required"] == ["name"] and schema["additionalProperties"] is False
    assert "Limits" in document["components"]["schemas"]  # its nested model, as a component
