"""The key store goes away under a running gateway: keys are refused (503), never let through
unchecked past the cache bound, and the admin API answers 503 too."""

from __future__ import annotations

import time
from pathlib import Path

import httpx

from tests.gatewayproc import start_gateway
from tests.integration.auth.conftest import ENV, Admin, admin_key, auth_gateway_config
from tests.pgserver import spawn_postgres
from tests.simproc import SimProcess

BOUND = 0.25  # short: the test waits it out once (polled for, nothing is timed)
BODY = {"model": "alpha", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}


def test_a_lost_store_fails_closed(sim: SimProcess, tmp_path: Path) -> None:
    postgres = spawn_postgres()
    try:
        url = postgres.create_database("outage")
        config = auth_gateway_config(sim.url, url, cache_seconds=BOUND)
        with start_gateway(config, tmp_path, env=ENV) as gateway:
            admin = Admin(gateway.url, admin_key(url))
            admin.post("/tenants", {"id": "acme"})
            key = admin.post("/tenants/acme/keys", {"name": "k"})["key"]
            headers = {"Authorization": f"Bearer {key}"}
            chat = gateway.base_url + "/chat/completions"
            assert httpx.post(chat, json=BODY, headers=headers, timeout=10).status_code == 200

            postgres.stop()
            # Served from the cache until the entry is past its bound; then the store must be
            # asked, and it is gone. Polled for, with a generous deadline.
            deadline = time.monotonic() + 60
            while (refused := httpx.post(chat, json=BODY, headers=headers, timeout=30)).is_success:
                assert time.monotonic() < deadline, "still served long past the cache's bound"
                time.sleep(0.05)
            assert refused.status_code == 503
            assert refused.json()["error"]["code"] == "key_store_unavailable"
            listing = admin.client.get("/keys", timeout=30)
            assert listing.status_code == 503
            admin.close()
            assert key.rsplit("-", 1)[1] not in gateway.logs()
    finally:
        postgres.stop()
