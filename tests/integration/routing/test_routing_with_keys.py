"""Routing with authentication on: stickiness per API key, force headers for trusted tenants only,
and the routing admin API behind admin keys."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import httpx

from tests.gatewayproc import start_gateway
from tests.integration.auth.conftest import ENV, Admin, admin_key
from tests.integration.routing.conftest import MODEL, NO_DELAY, SHORT, fast_pool
from tests.simproc import start_sim


def config(stable_url: str, canary_url: str, database_url: str) -> dict[str, Any]:
    return {
        "pools": {"stable": fast_pool(stable_url), "canary": fast_pool(canary_url)},
        "models": {
            MODEL: {
                "variants": {
                    "stable": {"weight": 50, "pools": {"colocated": "stable"}},
                    "canary": {"weight": 50, "pools": {"colocated": "canary"}},
                },
                "canary": {"baseline": "stable"},
            }
        },
        "storage": {"url": database_url},
        "auth": {"enabled": True, "cache_seconds": 5},
    }


def ask(gateway_url: str, key: str, **headers: str) -> httpx.Response:
    return httpx.post(
        gateway_url + "/v1/chat/completions",
        json={"model": MODEL, "messages": SHORT, "max_tokens": 2},
        headers={"Authorization": f"Bearer {key}", **headers},
        timeout=10,
    )


def test_keys_stick_and_only_trusted_tenants_force(tmp_path: Path) -> None:
    database_url = f"sqlite:///{tmp_path}/keys.db"
    with (
        start_sim("--model", MODEL, *NO_DELAY) as stable,
        start_sim("--model", MODEL, *NO_DELAY) as canary,
        start_gateway(config(stable.url, canary.url, database_url), tmp_path, env=ENV) as gw,
    ):
        admin = Admin(gw.url, admin_key(database_url))
        try:
            admin.post("/tenants", {"id": "ops", "labels": {"routing.force": "true"}})
            admin.post("/tenants", {"id": "plain"})
            keys = [admin.post("/tenants/plain/keys", {"name": f"k{i}"})["key"] for i in range(40)]
            ops_key = admin.post("/tenants/ops/keys", {"name": "ops"})["key"]

            seen = {
                key: {ask(gw.url, key).headers["x-gateway-variant"] for _ in range(3)}
                for key in keys
            }
            assert all(len(variants) == 1 for variants in seen.values())  # sticky per key
            assert set(Counter(v for vs in seen.values() for v in vs)) == {"stable", "canary"}

            plain_key = next(k for k, v in seen.items() if v == {"stable"})
            forced = ask(gw.url, plain_key, **{"x-gateway-variant": "canary"})
            assert forced.headers["x-gateway-variant"] == "stable"  # not trusted: ignored
            for wanted in ("canary", "stable"):
                forced = ask(gw.url, ops_key, **{"x-gateway-variant": wanted})
                assert forced.headers["x-gateway-variant"] == wanted

            assert httpx.get(gw.url + "/admin/routing", timeout=5).status_code == 401
            assert admin.get("/routing")["models"][MODEL]["variants"]["canary"]["weight"] == 50
        finally:
            admin.close()
