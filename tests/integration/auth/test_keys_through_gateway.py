"""Keys through a real gateway process, with the openai SDK as the client. Expiry is on the app's
clock: tests/seam/test_key_cache_clock.py."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest

from tests.gatewayproc import GatewayProcess, start_gateway
from tests.integration.auth.conftest import (
    ENV,
    HASH_SECRET,
    Admin,
    admin_key,
    auth_gateway_config,
    cli,
)
from tests.simproc import SimProcess

MESSAGES: Any = [{"role": "user", "content": "hello"}]


@pytest.fixture(scope="module")
def database_url(tmp_path_factory: pytest.TempPathFactory) -> str:
    return f"sqlite:///{tmp_path_factory.mktemp('store')}/keys.db"


@pytest.fixture(scope="module")
def gateway(
    sim: SimProcess, database_url: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[GatewayProcess]:
    config = auth_gateway_config(sim.url, database_url, cache_seconds=5)
    with start_gateway(config, tmp_path_factory.mktemp("gw"), env=ENV) as process:
        yield process


@pytest.fixture(scope="module")
def admin(gateway: GatewayProcess, database_url: str) -> Iterator[Admin]:
    client = Admin(gateway.url, admin_key(database_url))
    client.post("/tenants", {"id": "acme", "allowed_models": ["alpha", "beta"]})
    yield client
    client.close()


@pytest.fixture(scope="module")
def issued_secrets() -> list[str]:
    """Every secret handed out in this module: the log scan looks for each."""
    return []


def new_key(admin: Admin, secrets: list[str], **spec: Any) -> dict[str, Any]:
    issued = admin.post("/tenants/acme/keys", {"name": "k", **spec})
    secrets.append(issued["key"])
    return issued


Sdk = Callable[[str], openai.OpenAI]


@pytest.fixture
def sdk(gateway: GatewayProcess) -> Iterator[Sdk]:
    """Makes openai clients for keys; closes them all when the test ends."""
    made: list[openai.OpenAI] = []

    def make(key: str) -> openai.OpenAI:
        made.append(openai.OpenAI(base_url=gateway.base_url, api_key=key, max_retries=0))
        return made[-1]

    yield make
    for client in made:
        client.close()


def chat(client: openai.OpenAI, model: str = "alpha") -> str:
    completion = client.chat.completions.create(model=model, messages=MESSAGES, max_tokens=4)
    return completion.choices[0].message.content or ""


def test_a_valid_key_works(sdk: Sdk, admin: Admin, issued_secrets: list[str]) -> None:
    key = new_key(admin, issued_secrets)["key"]
    client = sdk(key)
    assert chat(client)
    stream = client.chat.completions.create(
        model="beta", messages=MESSAGES, max_tokens=4, stream=True
    )
    assert any(chunk.choices and chunk.choices[0].delta.content for chunk in stream)
    assert sorted(m.id for m in client.models.list()) == ["alpha", "beta"]


def test_the_api_key_header_works_too(
    gateway: GatewayProcess, admin: Admin, issued_secrets: list[str]
) -> None:
    key = new_key(admin, issued_secrets)["key"]
    response = httpx.get(gateway.base_url + "/models", headers={"api-key": key})
    assert response.status_code == 200


@pytest.mark.parametrize(
    "bad",
    ["sk-pdg-zzzzzzzzzzzz-" + "A" * 40, "dummy", "sk-pdg-x-y", "Bearer"],
)
def test_wrong_and_malformed_keys_are_refused(sdk: Sdk, bad: str) -> None:
    with pytest.raises(openai.AuthenticationError) as caught:
        chat(sdk(bad))
    assert caught.value.code == "invalid_api_key"
    assert "Incorrect API key" in caught.value.message


def test_a_wrong_secret_for_a_real_key_is_refused(
    sdk: Sdk, admin: Admin, issued_secrets: list[str]
) -> None:
    key = new_key(admin, issued_secrets)["key"]
    tampered = key[:-1] + ("A" if key[-1] != "A" else "B")
    with pytest.raises(openai.AuthenticationError):
        chat(sdk(tampered))


def test_a_missing_key_says_it_is_missing(gateway: GatewayProcess) -> None:
    response = httpx.post(gateway.base_url + "/chat/completions", json={"model": "alpha"})
    assert response.status_code == 401
    error = response.json()["error"]
    assert error["code"] == "invalid_api_key"
    assert "didn't provide an API key" in error["message"]


def test_a_revoked_key_is_refused(sdk: Sdk, admin: Admin, issued_secrets: list[str]) -> None:
    issued = new_key(admin, issued_secrets)
    client = sdk(issued["key"])
    assert chat(client)
    revoked = admin.post(f"/keys/{issued['id']}/revoke")
    assert revoked["revoked"] is True
    with pytest.raises(openai.AuthenticationError):
        chat(client)


def test_a_disabled_tenant_is_refused(sdk: Sdk, admin: Admin, issued_secrets: list[str]) -> None:
    admin.post("/tenants", {"id": "brief", "name": "Brief tenant"})
    issued = admin.post("/tenants/brief/keys", {"name": "k"})
    issued_secrets.append(issued["key"])
    client = sdk(issued["key"])
    assert chat(client)
    assert admin.post("/tenants/brief/disable")["enabled"] is False
    with pytest.raises(openai.AuthenticationError):
        chat(client)


def test_a_key_restricted_to_one_model_cannot_see_or_use_another(
    sdk: Sdk, admin: Admin, issued_secrets: list[str]
) -> None:
    key = new_key(admin, issued_secrets, allowed_models=["alpha"])["key"]
    client = sdk(key)
    assert chat(client, "alpha")
    assert [m.id for m in client.models.list()] == ["alpha"]
    assert client.models.retrieve("alpha").id == "alpha"
    with pytest.raises(openai.NotFoundError) as caught:
        chat(client, "beta")
    assert caught.value.code == "model_not_found"
    with pytest.raises(openai.NotFoundError) as not_listed:
        client.models.retrieve("beta")
    assert not_listed.value.code == "model_not_found"
    with pytest.raises(openai.NotFoundError) as absent:  # the same answer as a model nobody has
        chat(client, "gamma")
    assert absent.value.message.replace("gamma", "beta") == caught.value.message


def test_rotation_keeps_the_old_secret_for_the_grace_period(
    sdk: Sdk, admin: Admin, issued_secrets: list[str]
) -> None:
    issued = new_key(admin, issued_secrets)
    rotated = admin.post(f"/keys/{issued['id']}/rotate", {"grace_seconds": 60})
    issued_secrets.append(rotated["key"])
    assert rotated["id"] == issued["id"] and rotated["key"] != issued["key"]
    assert chat(sdk(rotated["key"]))
    assert chat(sdk(issued["key"]))
    again = admin.post(f"/keys/{issued['id']}/rotate")  # no grace: the previous one stops
    issued_secrets.append(again["key"])
    with pytest.raises(openai.AuthenticationError):
        chat(sdk(rotated["key"]))
    assert chat(sdk(again["key"]))


def test_listings_never_show_secrets(admin: Admin, issued_secrets: list[str]) -> None:
    listed = str(admin.get("/keys")) + str(admin.get("/tenants/acme/keys"))
    assert admin.get("/keys")["data"]
    for secret in issued_secrets:
        assert secret.rsplit("-", 1)[1] not in listed


def test_admin_routes_want_admin_keys(
    gateway: GatewayProcess, admin: Admin, issued_secrets: list[str]
) -> None:
    tenant_key = new_key(admin, issued_secrets)["key"]
    url = gateway.url + "/admin/tenants"
    forbidden = httpx.get(url, headers={"Authorization": f"Bearer {tenant_key}"})
    assert forbidden.status_code == 403
    assert forbidden.json()["error"]["code"] == "permission_denied"
    assert httpx.get(url).status_code == 401
    assert httpx.get(url, headers={"Authorization": "Bearer sk-nope"}).status_code == 401
    assert admin.get("/tenants")["data"][0]["id"] == "acme"


def test_an_admin_key_is_not_a_tenant_key(sdk: Sdk, database_url: str) -> None:
    with pytest.raises(openai.AuthenticationError):
        chat(sdk(admin_key(database_url)))


def test_admin_api_errors(admin: Admin) -> None:
    assert admin.client.post("/tenants", json={"id": "acme"}).status_code == 409
    assert admin.client.post("/tenants", json={"id": "Bad Id!"}).status_code == 400
    assert admin.client.post("/tenants/nobody/keys", json={"name": "k"}).status_code == 404
    wider = admin.client.post("/tenants/brief/keys", json={"name": "k", "allowed_models": ["x"]})
    assert wider.status_code in (200, 201)  # brief allows every model
    admin.post("/tenants", {"id": "narrow", "allowed_models": ["alpha"]})
    too_wide = admin.client.post(
        "/tenants/narrow/keys", json={"name": "k", "allowed_models": ["beta"]}
    )
    assert too_wide.status_code == 400
    assert admin.client.post("/keys/nosuchkey123/revoke").status_code == 404


@pytest.mark.parametrize("path", ["/healthz", "/readyz", "/openapi.json"])
def test_public_paths_need_no_key(gateway: GatewayProcess, path: str) -> None:
    assert httpx.get(gateway.url + path).status_code == 200


def test_tenant_figures_are_private_by_default(
    gateway: GatewayProcess, admin: Admin, sdk: Sdk, issued_secrets: list[str]
) -> None:
    chat(sdk(new_key(admin, issued_secrets)["key"]))  # acme's tokens are counted
    anonymous = httpx.get(gateway.url + "/metrics")
    assert anonymous.status_code == 401 and "acme" not in anonymous.text
    tenant_key = new_key(admin, issued_secrets)["key"]
    as_tenant = httpx.get(gateway.url + "/metrics", headers={"api-key": tenant_key})
    assert as_tenant.status_code == 403
    whole = httpx.get(gateway.url + "/metrics", headers=dict(admin.client.headers))
    assert whole.status_code == 200 and 'tenant="acme"' in whole.text


def test_every_other_path_needs_a_key(gateway: GatewayProcess) -> None:
    for path in ("/v1/models", "/v1/models/alpha", "/nowhere", "/admin/keys"):
        assert httpx.get(gateway.url + path).status_code == 401, path


def test_the_cli_bootstraps_a_working_key(sdk: Sdk, database_url: str) -> None:
    cli(database_url, "tenants", "create", "demo", "--if-missing")
    cli(database_url, "tenants", "create", "demo", "--if-missing")  # twice is fine
    key = cli(database_url, "keys", "create", "--tenant", "demo", "--name", "local",
              "--print-secret-only")  # fmt: skip
    assert key.startswith("sk-pdg-") and "\n" not in key
    assert chat(sdk(key))


def test_zz_nothing_secret_in_the_logs(
    gateway: GatewayProcess, issued_secrets: list[str], tmp_path: Path
) -> None:
    """Runs last in the module: every key handed out above has been used, refused or revoked."""
    assert len(issued_secrets) >= 10
    logs = gateway.logs()
    assert '"logger":"gateway.access"' in logs.replace(" ", "")
    assert HASH_SECRET not in logs
    for token in issued_secrets:
        secret = token.rsplit("-", 1)[1]
        assert secret not in logs
    key_ids = [token.split("-")[2] for token in issued_secrets]
    assert any(key_id in logs for key_id in key_ids)  # the public id does name keys in the log
