"""Two gateway processes on one real PostgreSQL: a key revoked (or its tenant disabled) through one
stops working on the other within the configured bound (auth.cache_seconds); a key made or rotated
through one works on the other at once (within the one-second reread)."""

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
SLACK = 1.0  # a loaded CI machine: request latency on top of the bound
MESSAGES: list[dict[str, str]] = [{"role": "user", "content": "hello"}]

Replicas = tuple[GatewayProcess, GatewayProcess, Admin]


@pytest.fixture(scope="module")
def replicas(sim: SimProcess, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Replicas]:
    with start_postgres() as postgres:
        yield from _two_gateways(postgres, sim, tmp_path_factory)


def _two_gateways(
    postgres: PostgresServer, sim: SimProcess, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Replicas]:
    url = postgres.create_database("replicas")
    config = auth_gateway_config(sim.url, url, cache_seconds=BOUND)
    with (
        start_gateway(config, tmp_path_factory.mktemp("a"), env=ENV) as first,
        start_gateway(config, tmp_path_factory.mktemp("b"), env=ENV) as second,
    ):
        admin = Admin(first.url, admin_key(url))
        try:
            yield first, second, admin
        finally:
            admin.close()


def _works(gateway: GatewayProcess, key: str) -> bool:
    with openai.OpenAI(base_url=gateway.base_url, api_key=key, max_retries=0) as client:
        try:
            client.chat.completions.create(model="alpha", messages=MESSAGES, max_tokens=2)  # type: ignore[arg-type]
        except openai.AuthenticationError:
            return False
    return True


def _seconds_until_refused(gateway: GatewayProcess, key: str, since: float) -> float:
    while _works(gateway, key):
        assert time.monotonic() - since < BOUND + SLACK, "still accepted past the bound"
        time.sleep(0.05)
    return time.monotonic() - since


def test_revoking_through_one_replica_reaches_the_other_within_the_bound(
    replicas: Replicas,
) -> None:
    first, second, admin = replicas
    admin.post("/tenants", {"id": "acme"})
    issued = admin.post("/tenants/acme/keys", {"name": "shared"})
    key = issued["key"]
    assert _works(first, key) and _works(second, key)  # both caches warm

    admin.post(f"/keys/{issued['id']}/revoke")
    revoked_at = time.monotonic()
    assert not _works(first, key)  # the replica that revoked: at once
    assert _seconds_until_refused(second, key, revoked_at) <= BOUND + SLACK


def test_disabling_a_tenant_reaches_the_other_within_the_bound(replicas: Replicas) -> None:
    first, second, admin = replicas
    admin.post("/tenants", {"id": "gone"})
    key = admin.post("/tenants/gone/keys", {"name": "k"})["key"]
    assert _works(second, key)
    admin.post("/tenants/gone/disable")
    disabled_at = time.monotonic()
    assert not _works(first, key)
    assert _seconds_until_refused(second, key, disabled_at) <= BOUND + SLACK


def test_a_key_rotated_through_one_works_on_the_other_at_once(replicas: Replicas) -> None:
    first, second, admin = replicas
    admin.post("/tenants", {"id": "rot"})
    issued = admin.post("/tenants/rot/keys", {"name": "k"})
    assert _works(second, issued["key"])  # second caches the old secret's hash
    time.sleep(1.0)  # the reread allowance: an entry at least a second old is read again
    rotated = admin.post(f"/keys/{issued['id']}/rotate")
    assert _works(second, rotated["key"])
    assert _works(first, rotated["key"])
