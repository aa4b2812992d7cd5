"""Two gateway processes on one real PostgreSQL: a key revoked (or its tenant disabled) through one
stops working on the other too, through the shared store.

How long the other may keep serving it (auth.cache_seconds, and the one-second reread after a
rotation) is timing, checked on a clock the test moves: tests/seam/test_key_cache_clock.py. Here
the other replica is polled, with a generous deadline, until it refuses."""

from __future__ import annotations

import time
from collections.abc import Iterator

import openai
import pytest

from tests.gatewayproc import GatewayProcess, start_gateway
from tests.integration.auth.conftest import ENV, Admin, admin_key, auth_gateway_config
from tests.pgserver import PostgresServer, start_postgres
from tests.simproc import SimProcess

BOUND = 0.5
DEADLINE = 60.0  # a loaded machine: only a replica that never learns of the change fails
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


def _refused_in_the_end(gateway: GatewayProcess, key: str) -> bool:
    deadline = time.monotonic() + DEADLINE
    while _works(gateway, key):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def test_revoking_through_one_replica_reaches_the_other(
    replicas: Replicas,
) -> None:
    first, second, admin = replicas
    admin.post("/tenants", {"id": "acme"})
    issued = admin.post("/tenants/acme/keys", {"name": "shared"})
    key = issued["key"]
    assert _works(first, key) and _works(second, key)  # both caches warm

    admin.post(f"/keys/{issued['id']}/revoke")
    assert not _works(first, key)  # the replica that revoked: at once
    assert _refused_in_the_end(second, key)


def test_disabling_a_tenant_reaches_the_other(replicas: Replicas) -> None:
    first, second, admin = replicas
    admin.post("/tenants", {"id": "gone"})
    key = admin.post("/tenants/gone/keys", {"name": "k"})["key"]
    assert _works(second, key)
    admin.post("/tenants/gone/disable")
    assert not _works(first, key)
    assert _refused_in_the_end(second, key)
