"""Prices through the admin API: set, shown, cleared, refused as config prices are, applied to
the next request's ledger row with their own version, and reaching another replica on the same
store at its next read (two apps on one SQLite file stand in for two replicas; the two-process
case on PostgreSQL is tests/integration/auth/test_prices_replicas.py)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import orjson
import pytest

from gateway.accounting.prices import Price, cost
from gateway.clock import ManualClock
from tests.seam.harness import Gateway, Reply, running_gateway
from tests.seam.test_exit_paths import CHAT, chat
from tests.seam.upstream import Script

AUTH = {"enabled": True, "hash_secret": "seam-test-hash-secret-0123456789"}
MODELS = {
    "m": {"pool": "pd"},
    "v": {
        "variants": {
            "stable": {"weight": 1, "pools": {"colocated": "pd"}},
            "canary": {"weight": 0, "pools": {"colocated": "pd"}},
        }
    },
}
CONFIG_PRICES = {"currency": "USD", "models": {"m": {"input": "1", "output": "2"}}}
SCRIPTS = {"default": Script(), "cached": Script(cached=7)}
PRICE = {"currency": "USD", "input": "0.15", "cached_input": "0.075", "output": "0.600001"}


def bearer(token: str) -> tuple[tuple[bytes, bytes], ...]:
    return ((b"authorization", f"Bearer {token}".encode()),)


class Client:
    def __init__(self, gateway: Gateway, token: str) -> None:
        self.gateway, self.headers = gateway, bearer(token)

    async def call(self, method: str, path: str, body: Any = None) -> Reply:
        raw = b"" if body is None else orjson.dumps(body)
        return await self.gateway.call(path, raw, headers=self.headers, method=method)


@asynccontextmanager
async def gateways(tmp_path: Path, n: int = 1, **extra: Any) -> AsyncIterator[list[Gateway]]:
    clock = ManualClock()
    settings: dict[str, Any] = {"auth": AUTH, "prices": CONFIG_PRICES, **extra}
    async with running_gateway(tmp_path, SCRIPTS, clock, **settings) as first:
        if n == 1:
            yield [first]
            return
        async with running_gateway(tmp_path, SCRIPTS, clock, **settings) as second:
            yield [first, second]


async def admin_and_tenant(gw: Gateway) -> tuple[Client, Client]:
    assert gw.state.auth is not None
    manager = gw.state.auth.manager
    admin = await manager.create_admin_key("ops")
    from gateway.auth.manage import KeySpec, TenantSpec

    await manager.create_tenant(TenantSpec(id="acme"))
    issued = await manager.create_key("acme", KeySpec(name="k"))
    return Client(gw, admin.token), Client(gw, issued.token)


async def rows_written(gw: Gateway, n: int) -> list[Any]:
    ledger = gw.state.accounting.ledger
    assert ledger is not None
    async with asyncio.timeout(30):
        while ledger.written < n:
            await asyncio.sleep(0.01)
    return gw.ledger_rows()


async def test_a_price_set_shown_used_and_cleared(tmp_path: Path) -> None:
    async with gateways(tmp_path, models=MODELS) as [gw]:
        admin, tenant = await admin_and_tenant(gw)
        listing = (await admin.call("GET", "/admin/prices")).json()
        assert listing["currency"] == "USD"
        [configured] = listing["data"]
        assert configured["source"] == "config" and configured["input"] == "1"

        set_reply = await admin.call("PUT", "/admin/prices/m", PRICE)
        assert set_reply.status == 200, set_reply.body
        entry = set_reply.json()
        assert entry["source"] == "admin" and entry["version"].startswith("USD-admin-")
        assert (entry["input"], entry["cached_input"], entry["output"]) == (
            "0.15",
            "0.075",
            "0.600001",
        )
        assert entry["set_by"] is not None and entry["set_at"] == gw.clock.wall()

        await tenant.call("POST", CHAT, orjson.loads(chat("cached", stream=True)))
        [row] = await rows_written(gw, 1)
        assert row["price_version"] == entry["version"]
        price = Price(150_000, 75_000, 600_001, 0, entry["version"])
        assert row["cost_micros"] == cost(
            price, input_tokens=row["input_tokens"], cached_tokens=row["cached_tokens"],
            output_tokens=row["output_tokens"],
        )  # fmt: skip
        assert row["cached_tokens"] == 7

        cleared = await admin.call("DELETE", "/admin/prices/m")
        assert cleared.status == 200 and cleared.json()["price"]["source"] == "config"
        again = await admin.call("DELETE", "/admin/prices/m")
        assert again.status == 404
        await tenant.call("POST", CHAT, orjson.loads(chat()))
        rows = await rows_written(gw, 2)
        assert rows[-1]["price_version"] == configured["version"]


async def test_a_variant_has_its_own_price_and_the_model_keeps_its_own(tmp_path: Path) -> None:
    async with gateways(tmp_path, models=MODELS) as [gw]:
        admin, _ = await admin_and_tenant(gw)
        canary = await admin.call("PUT", "/admin/prices/v/variants/canary", PRICE)
        assert canary.status == 200, canary.body
        assert canary.json()["variant"] == "canary"
        shown = (await admin.call("GET", "/admin/prices/v")).json()["data"]
        assert [(e["model"], e["variant"]) for e in shown] == [("v", "canary")]
        table = gw.state.accounting.prices
        assert table.price("v", "canary") is not None and table.price("v", "stable") is None
        assert table.price("m", None) is not None  # the config's, untouched
        await admin.call("DELETE", "/admin/prices/v/variants/canary")
        assert gw.state.accounting.prices.price("v", "canary") is None


@pytest.mark.parametrize(
    ("path", "body", "param", "says"),
    [
        ("/admin/prices/nope", PRICE, "model", "no such model"),
        ("/admin/prices/v/variants/nope", PRICE, "variant", "no such variant"),
        ("/admin/prices/m", {**PRICE, "input": "-1"}, None, "negative"),
        ("/admin/prices/m", {k: v for k, v in PRICE.items() if k != "currency"}, None, "currency"),
        ("/admin/prices/m", {**PRICE, "currency": "EUR"}, "currency", "in USD here"),
        ("/admin/prices/m", {**PRICE, "currency": "usd"}, None, "ISO 4217"),
        ("/admin/prices/m", {**PRICE, "output": 0.1}, None, "decimal string"),
        ("/admin/prices/m", {**PRICE, "output": "0.0000001"}, None, "finer than the sub-unit"),
        ("/admin/prices/m", {**PRICE, "batch_discount": "1"}, None, "below 1"),
        ("/admin/prices/m", {**PRICE, "extra": "1"}, None, "extra"),
    ],
)
async def test_bad_prices_are_refused_like_config_prices(
    tmp_path: Path, path: str, body: dict[str, Any], param: str | None, says: str
) -> None:
    async with gateways(tmp_path, models=MODELS) as [gw]:
        admin, _ = await admin_and_tenant(gw)
        reply = await admin.call("PUT", path, body)
        assert reply.status == 400, reply.body
        error = reply.json()["error"]
        assert error["type"] == "invalid_request_error" and says in error["message"]
        if param is not None:
            assert error["param"] == param
        assert len((await admin.call("GET", "/admin/prices")).json()["data"]) == 1  # unchanged


async def test_not_json_is_a_400_and_a_tenant_key_may_not_touch_prices(tmp_path: Path) -> None:
    async with gateways(tmp_path) as [gw]:
        admin, tenant = await admin_and_tenant(gw)
        raw = await gw.call("/admin/prices/m", b"{", headers=admin.headers, method="PUT")
        assert raw.status == 400 and raw.json()["error"]["code"] == "invalid_json"
        for method in ("GET", "PUT", "DELETE"):
            refused = await tenant.call(method, "/admin/prices/m", PRICE)
            assert refused.status == 403, (method, refused.body)
        anonymous = await gw.call("/admin/prices", b"", method="GET")
        assert anonymous.status == 401
        assert gw.state.accounting.prices.price("m", None) is not None
        assert (await admin.call("GET", "/admin/prices/nope")).status == 404


async def test_without_config_prices_the_first_api_price_names_the_currency(
    tmp_path: Path,
) -> None:
    async with gateways(tmp_path, prices={}) as [gw]:
        admin, _ = await admin_and_tenant(gw)
        assert (
            await admin.call("PUT", "/admin/prices/m", {**PRICE, "currency": "EUR"})
        ).status == 200
        assert gw.state.accounting.prices.currency == "EUR"
        # Setting the same entry again may change its currency; another entry may not differ.
        assert (await admin.call("PUT", "/admin/prices/m", PRICE)).status == 200
        assert gw.state.accounting.prices.currency == "USD"


async def test_a_price_set_through_one_replica_prices_the_others_rows(tmp_path: Path) -> None:
    async with gateways(tmp_path, 2, models=MODELS) as [first, second]:
        admin, _ = await admin_and_tenant(first)
        version = (await admin.call("PUT", "/admin/prices/m", PRICE)).json()["version"]
        assert first.state.accounting.prices.price("m", None).version == version  # type: ignore[union-attr]
        before = second.state.accounting.prices.price("m", None)
        assert before is not None and before.version != version  # not read yet
        await second.state.accounting.book.refresh()  # what its poll does every few seconds
        after = second.state.accounting.prices.price("m", None)
        assert after is not None and after.version == version
        await admin.call("DELETE", "/admin/prices/m")
        await second.state.accounting.book.refresh()
        assert second.state.accounting.prices.price("m", None) == before


async def test_a_config_reload_keeps_the_api_prices_over_the_new_config(tmp_path: Path) -> None:
    from gateway.accounting.prices import PricesConfig, PriceTable

    async with gateways(tmp_path, models=MODELS) as [gw]:
        admin, _ = await admin_and_tenant(gw)
        version = (await admin.call("PUT", "/admin/prices/m", PRICE)).json()["version"]
        reloaded = {
            "currency": "USD",
            "models": {"m": {"input": "3", "output": "4"}, "v": {"input": "5", "output": "6"}},
        }
        gw.state.accounting.book.configure(PriceTable.build(PricesConfig.model_validate(reloaded)))
        table = gw.state.accounting.prices
        assert table.price("m", None).version == version  # type: ignore[union-attr]
        assert table.price("v", None).input == 5_000_000  # type: ignore[union-attr]
