"""Stored responses belong to the tenant of the key that made them: through a real gateway
process with keys on, on SQLite and on a real PostgreSQL server, another tenant's key gets the
404 of a response that does not exist, for reading, listing, deleting and continuing alike; an
admin purges one tenant's responses; the usage report counts the calls that made them."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import openai
import pytest

from tests.gatewayproc import GatewayProcess, start_gateway
from tests.integration.auth.conftest import ENV, Admin, admin_key, auth_gateway_config
from tests.pgserver import start_postgres
from tests.simproc import SimProcess


@pytest.fixture(scope="module", params=["sqlite", "postgresql"])
def database_url(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[str]:
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path_factory.mktemp('store')}/gateway.db"
        return
    with start_postgres() as postgres:
        yield postgres.create_database("responses")


@pytest.fixture(scope="module")
def gateway(
    sim: SimProcess, database_url: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[GatewayProcess]:
    config = auth_gateway_config(sim.url, database_url)
    config["server"] = {"log_level": "info"}
    config["accounting"] = {"ledger_interval": 0.05}
    with start_gateway(config, tmp_path_factory.mktemp("gw"), env=ENV) as process:
        yield process


@pytest.fixture(scope="module")
def tenants(gateway: GatewayProcess, database_url: str) -> Iterator[tuple[Admin, dict[str, str]]]:
    admin = Admin(gateway.url, admin_key(database_url))
    keys = {}
    for tenant in ("acme", "rival"):
        admin.post("/tenants", {"id": tenant})
        keys[tenant] = admin.post(f"/tenants/{tenant}/keys", {"name": "k"})["key"]
    yield admin, keys
    admin.close()


def sdk(gateway: GatewayProcess, key: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=gateway.base_url, api_key=key, max_retries=0)


def test_another_tenant_gets_404_everywhere(
    gateway: GatewayProcess, tenants: tuple[Admin, dict[str, str]]
) -> None:
    _, keys = tenants
    with sdk(gateway, keys["acme"]) as acme, sdk(gateway, keys["rival"]) as rival:
        made = acme.responses.create(model="alpha", input="Hello", max_output_tokens=16)
        calls: list[Any] = [
            lambda: rival.responses.retrieve(made.id),
            lambda: list(rival.responses.input_items.list(made.id)),
            lambda: rival.responses.delete(made.id),
            lambda: rival.responses.create(
                model="alpha", input="more", previous_response_id=made.id
            ),
        ]
        for call in calls:
            with pytest.raises(openai.NotFoundError, match="not found"):
                call()
        assert acme.responses.retrieve(made.id).id == made.id  # untouched by the attempts
        follow = acme.responses.create(
            model="alpha", input="more", previous_response_id=made.id, max_output_tokens=16
        )
        assert follow.previous_response_id == made.id


def test_an_admin_purges_a_tenants_responses(
    gateway: GatewayProcess, tenants: tuple[Admin, dict[str, str]]
) -> None:
    admin, keys = tenants
    with sdk(gateway, keys["acme"]) as acme, sdk(gateway, keys["rival"]) as rival:
        mine = acme.responses.create(model="alpha", input="Hello", max_output_tokens=16)
        theirs = rival.responses.create(model="alpha", input="Hello", max_output_tokens=16)
        purged = admin.client.delete("/tenants/acme/responses")
        assert purged.status_code == 200 and purged.json()["deleted"] >= 1
        with pytest.raises(openai.NotFoundError):
            acme.responses.retrieve(mine.id)
        assert rival.responses.retrieve(theirs.id).id == theirs.id
    as_tenant = httpx.delete(
        f"{gateway.url}/admin/tenants/rival/responses",
        headers={"Authorization": f"Bearer {keys['acme']}"},
    )
    assert as_tenant.status_code == 403  # /admin/ takes admin keys only


def test_the_usage_report_counts_the_calls(
    gateway: GatewayProcess, tenants: tuple[Admin, dict[str, str]]
) -> None:
    admin, _ = tenants
    for _ in range(100):  # rows arrive within the ledger's interval
        rows = admin.get("/usage?tenant_id=rival&group_by=tenant_id")["data"]
        if rows and rows[0]["requests"] >= 1:
            break
    assert rows and rows[0]["requests"] >= 1 and rows[0]["input_tokens"] > 0
