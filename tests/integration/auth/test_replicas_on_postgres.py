"""Two gateway processes on one real PostgreSQL: a key revoked through one stops working on the
other within the configured bound (auth.cache_seconds)."""

from __future__ import annotations

import time
from collections.abc import Iterator

import openai
import pytest

from tests.gatewayproc import GatewayProcess, start_gateway
from tests.integration.auth.conftest import ENV, Admin, admin_key, auth_gateway_config
from tests.pgserver import PostgresServer, start_postgres
from tests.simproc import SimProcess

BOUND = 2.0
MESSAGES: list[dict[str, str]] = [{"role": "user", "content": "hello"}]


@pytest.fixture(scope="module")
def postgres() -> Iterator[PostgresServer]:
    with start_postgres() as server:
        yield server


def _works(gateway: GatewayProcess, key: str) -> bool:
    with openai.OpenAI(base_url=gateway.base_url, api_key=key, max_retries=0) as client:
        try:
            client.chat.completions.create(model="alpha", messages=MESSAGES, max_tokens=2)  # type: ignore[arg-type]
        except openai.AuthenticationError:
            return False
    return True


def test_revoking_through_one_replica_reaches_the_other_within_the_bound(
    sim: SimProcess, postgres: PostgresServer, tmp_path_factory: pytest.TempPathFactory
) -> None:
    url = postgres.create_database("replicas")
    config = auth_gateway_config(sim.url, url, cache_seconds=BOUND)
    with (
        start_gateway(config, tmp_path_factory.mktemp("a"), env=ENV) as first,
        start_gateway(config, tmp_path_factory.mktemp("b"), env=ENV) as second,
    ):
        admin = Admin(first.url, admin_key(url))
        try:
            admin.post("/tenants", {"id": "acme"})
            issued = admin.post("/tenants/acme/keys", {"name": "shared"})
            key = issued["key"]
            assert _works(first, key) and _works(second, key)  # both caches warm

            admin.post(f"/keys/{issued['id']}/revoke")
            revoked_at = time.monotonic()
            assert not _works(first, key)  # the replica that revoked: at once
            while _works(second, key):
                assert time.monotonic() - revoked_at < BOUND + 1.0, "still accepted past the bound"
                time.sleep(0.05)
            refused_after = time.monotonic() - revoked_at
        finally:
            admin.close()
    assert refused_after <= BOUND + 1.0
    assert "replicas" in url
