"""Prices set through ``pd-gateway prices`` and the admin API, as real processes: the CLI on a fresh
store, and two gateway processes on one real PostgreSQL where a price set through one prices the
other's ledger rows (with its own version) after the other's next read of the store."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from decimal import ROUND_HALF_UP, Decimal
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
import yaml

from tests.gatewayproc import GatewayProcess, start_gateway
from tests.integration.auth.conftest import ENV, Admin, admin_key, auth_gateway_config, cli
from tests.pgserver import PostgresServer, start_postgres
from tests.simproc import SimProcess

CONFIG_PRICE = {"input": "1", "output": "2"}
DEADLINE = 60.0  # a loaded machine: only a replica that never reads the change fails
SYNC = 0.2


def _config_file(tmp_path: Path, database_url: str) -> str:
    config = {
        "pools": {"p": {"urls": ["http://127.0.0.1:9"]}},
        "models": {
            "alpha": {"pool": "p"},
            "beta": {"variants": {"stable": {"weight": 1, "pools": {"colocated": "p"}},
                                  "canary": {"weight": 0, "pools": {"colocated": "p"}}}},
        },
        "prices": {"currency": "USD", "models": {"alpha": CONFIG_PRICE}},
        "storage": {"url": database_url},
    }  # fmt: skip
    path = tmp_path / "gateway.yaml"
    path.write_text(yaml.safe_dump(config))
    return str(path)


def _fails(database_url: str, *args: str) -> str:
    result = subprocess.run(
        [sys.executable, "-m", "gateway", *args, "--database-url", database_url],
        capture_output=True, text=True, env={**os.environ, **ENV}, timeout=120,
    )  # fmt: skip
    assert result.returncode == 1 and result.stdout == "", result
    return result.stderr


def test_prices_show_set_and_clear_on_the_store(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/cli.db"
    config = _config_file(tmp_path, url)
    shown = json.loads(cli(url, "prices", "show", "--config", config))
    [entry] = shown["data"]
    assert (entry["model"], entry["source"], entry["input"]) == ("alpha", "config", "1")

    price = ["--currency", "USD", "--input", "0.2", "--cached-input", "0.05", "--output", "0.8"]
    made = json.loads(cli(url, "prices", "set", "alpha", *price, "--config", config))
    assert made["source"] == "admin" and made["version"] == "USD-admin-1"
    assert (made["cached_input"], made["set_by"]) == ("0.05", "cli")
    canary = json.loads(
        cli(url, "prices", "set", "beta", "--variant", "canary", *price, "--config", config)
    )
    assert canary["variant"] == "canary" and canary["version"] == "USD-admin-2"

    assert "no such model" in _fails(url, "prices", "set", "gamma", *price, "--config", config)
    assert "no such variant" in _fails(
        url, "prices", "set", "beta", "--variant", "x", *price, "--config", config
    )
    euro = [*price[:1], "EUR", *price[2:]]
    assert "in USD here" in _fails(url, "prices", "set", "alpha", *euro, "--config", config)
    negative = [*price[:3], "-1", *price[4:]]
    assert "negative" in _fails(url, "prices", "set", "alpha", *negative, "--config", config)
    assert "needs --config" in _fails(url, "prices", "set", "alpha", *price)

    listed = json.loads(cli(url, "prices", "show", "--config", config))["data"]
    assert [(e["model"], e["variant"], e["source"]) for e in listed] == [
        ("alpha", None, "admin"), ("beta", "canary", "admin"),
    ]  # fmt: skip
    cleared = json.loads(cli(url, "prices", "clear", "alpha"))
    assert cleared["deleted"] is True
    assert "no price was set" in _fails(url, "prices", "clear", "alpha")
    back = json.loads(cli(url, "prices", "show", "alpha", "--config", config))["data"]
    assert [e["source"] for e in back] == ["config"]


Replicas = tuple[GatewayProcess, GatewayProcess, Admin, PostgresServer, str]


@pytest.fixture(scope="module")
def replicas(sim: SimProcess, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Replicas]:
    with start_postgres() as postgres:
        url = postgres.create_database("prices")
        config = auth_gateway_config(sim.url, url)
        config["prices"] = {"currency": "USD", "models": {"alpha": CONFIG_PRICE}}
        config["accounting"] = {"prices_sync_seconds": SYNC, "ledger_interval": 0.1}
        with (
            start_gateway(config, tmp_path_factory.mktemp("a"), env=ENV) as first,
            start_gateway(config, tmp_path_factory.mktemp("b"), env=ENV) as second,
        ):
            admin = Admin(first.url, admin_key(url))
            try:
                yield first, second, admin, postgres, url
            finally:
                admin.close()


def _shown(gateway: GatewayProcess, key: str) -> dict[str, Any]:
    """The replica's own prices in force (each answers from its own book)."""
    reply = httpx.get(
        gateway.url + "/admin/prices/alpha", headers={"Authorization": f"Bearer {key}"}, timeout=10
    )
    assert reply.status_code == 200, reply.text
    [entry] = reply.json()["data"]
    return dict(entry)


def _eventually(check: Callable[[], bool]) -> bool:
    deadline = time.monotonic() + DEADLINE
    while not check():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def _priced(row: list[str], price: dict[str, str]) -> int:
    inp, cached, out = (int(x) for x in row[:3])
    units = (
        (inp - cached) * Decimal(price["input"])
        + cached * Decimal(price.get("cached_input", price["input"]))
        + out * Decimal(price["output"])
    )
    return int(units.quantize(Decimal(1), rounding=ROUND_HALF_UP))


def test_a_price_set_through_one_replica_prices_the_others_rows(replicas: Replicas) -> None:
    first, second, admin, postgres, url = replicas
    key = admin.client.headers["Authorization"].split()[1]
    admin.post("/tenants", {"id": "acme"})
    tenant_key = admin.post("/tenants/acme/keys", {"name": "k"})["key"]
    price = {"currency": "USD", "input": "0.15", "cached_input": "0.075", "output": "0.600001"}
    reply = admin.client.put("/prices/alpha", json=price)
    assert reply.status_code == 200, reply.text
    version = reply.json()["version"]
    assert _shown(first, key)["version"] == version  # the replica that took it: at once
    assert _eventually(lambda: _shown(second, key)["version"] == version)

    with openai.OpenAI(base_url=second.base_url, api_key=tenant_key, max_retries=0) as client:
        client.chat.completions.create(
            model="alpha", messages=[{"role": "user", "content": "hi"}], max_tokens=5
        )
    query = (
        "SELECT input_tokens, cached_tokens, output_tokens, cost_micros, price_version "
        "FROM usage_ledger ORDER BY id"
    )
    rows: list[list[str]] = []

    def written() -> bool:
        rows[:] = [line.split("|") for line in postgres.psql(query, "prices").splitlines() if line]
        return bool(rows)

    assert _eventually(written)
    [row] = rows
    assert row[4] == version and int(row[3]) == _priced(row, price)

    # Cleared through the CLI, on the store: both replicas fall back to the config's price.
    cli(url, "prices", "clear", "alpha")
    for gateway in (first, second):
        assert _eventually(lambda g=gateway: _shown(g, key)["source"] == "config")  # type: ignore[misc]
