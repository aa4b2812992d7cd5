"""Budgets through the whole gateway: a hard budget refuses with OpenAI's insufficient_quota once
less than a request's maximum cost remains, naming the key or the tenant and when it resets; a
soft one admits and alerts; what was kept is what the ledger's rows cost."""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import orjson

from tests.seam.harness import Gateway, running_gateway
from tests.seam.test_exit_paths import CHAT, chat
from tests.seam.test_key_cache_clock import AUTH, Admin, bearer
from tests.seam.upstream import Script

PRICES = {"currency": "USD", "models": {"m": {"input": "15", "output": "60"}}}
COST = 11 * 15 + 3 * 60  # micro-units: the scripted usage (11 prompt, 3 output tokens)
SCRIPTS = {"default": Script(), "whole": Script(kind="whole")}


@asynccontextmanager
async def gateway(tmp_path: Path, **overrides: Any) -> AsyncIterator[tuple[Gateway, Admin]]:
    async with running_gateway(tmp_path, SCRIPTS, auth=AUTH, prices=PRICES, **overrides) as gw:
        assert gw.state.auth is not None
        issued = await gw.state.auth.manager.create_admin_key("tests")
        yield gw, Admin(gw, issued.token)


async def tenant_and_key(
    admin: Admin, tenant: dict[str, Any] | None, key: dict[str, Any] | None
) -> tuple[str, str]:
    limits = {} if tenant is None else {"budget": tenant}
    await admin.post("/tenants", {"id": "acme", "limits": limits})
    issued = await admin.post(
        "/tenants/acme/keys", {"name": "k", "limits": {} if key is None else {"budget": key}}
    )
    return issued["id"], issued["key"]


async def spend_until_refused(gw: Gateway, token: str, most: int = 50) -> tuple[int, Any]:
    """Requests one after another until one is refused: (admitted, the refusal)."""
    for admitted in range(most):
        reply = await gw.call(CHAT, chat("whole", max_tokens=5), headers=bearer(token))
        if reply.status != 200:
            return admitted, reply
    raise AssertionError("never refused")


async def ledger_costs(gw: Gateway, rows: int) -> list[int]:
    ledger = gw.state.accounting.ledger
    assert ledger is not None
    async with asyncio.timeout(30):
        while ledger.written < rows:
            await asyncio.sleep(0.01)
    return [r["cost_micros"] for r in gw.ledger_rows()]


def figures(message: str) -> tuple[int, int, int]:
    """Limit, committed and requested from the refusal's message, in micro-units."""
    found = re.search(
        r"Limit (\d+)\.(\d+), Committed (\d+)\.(\d+), Requested (\d+)\.(\d+)", message
    )
    assert found, message
    parts = [int(p) for p in found.groups()]
    return tuple(parts[i] * 1_000_000 + parts[i + 1] for i in (0, 2, 4))  # type: ignore[return-value]


async def test_a_hard_key_budget_refuses_with_insufficient_quota_once_it_cannot_cover_one_more(
    tmp_path: Path,
) -> None:
    async with gateway(tmp_path) as (gw, admin):
        key_id, token = await tenant_and_key(admin, None, {"amount": "0.002"})
        admitted, refused = await spend_until_refused(gw, token)
        assert refused.status == 429
        assert refused.headers[b"x-should-retry"] == b"false"
        assert b"retry-after" not in refused.headers
        error = refused.json()["error"]
        assert error["type"] == "insufficient_quota" and error["code"] == "insufficient_quota"
        assert f"Budget exhausted for key {key_id}" in error["message"]
        # The app's clock starts on 2027-01-15: a month budget resets on the first of February.
        assert "It resets at 2027-02-01T00:00:00Z." in error["message"]
        limit, committed, requested = figures(error["message"])
        assert (limit, committed) == (2000, admitted * COST)  # settled: only what each cost
        assert committed + requested > limit >= committed  # less than one reservation remained
        assert requested > COST  # the reservation is the maximum (5 output tokens, not 3)
        costs = await ledger_costs(gw, admitted)
        assert sum(c for c in costs if c) == admitted * COST <= limit
        gw.clock.advance(17 * 86400)  # February: a new budget
        after = await gw.call(CHAT, chat("whole", max_tokens=5), headers=bearer(token))
        assert after.status == 200, after.body


async def test_a_keys_budget_never_lifts_its_tenants_and_the_refusal_names_the_tenant(
    tmp_path: Path,
) -> None:
    async with gateway(tmp_path) as (gw, admin):
        _, token = await tenant_and_key(
            admin, {"amount": "0.001", "period": "day"}, {"amount": "100"}
        )
        admitted, refused = await spend_until_refused(gw, token)
        assert refused.status == 429 and admitted >= 1
        message = refused.json()["error"]["message"]
        assert "Budget exhausted for tenant acme" in message
        assert "It resets at 2027-01-16T00:00:00Z." in message  # a day budget: midnight UTC
        limit, committed, requested = figures(message)
        assert (limit, committed) == (1000, admitted * COST)
        assert committed + requested > limit


async def test_a_soft_budget_admits_past_its_amount_and_alerts_once_per_threshold(
    tmp_path: Path,
) -> None:
    async with gateway(tmp_path) as (gw, admin):
        _, token = await tenant_and_key(admin, None, {"amount": "0.0005", "mode": "soft"})
        for _ in range(4):  # 4 x 345 = 1380 of 500: every one admitted
            reply = await gw.call(CHAT, chat("whole"), headers=bearer(token))
            assert reply.status == 200
        await gw.state.accounting.limiter.backend.drain()
        metrics = await gw.call("/metrics", b"", headers=admin.headers, method="GET")
        text = metrics.body.decode()
        for threshold in (50, 80, 100):
            line = f'gateway_budget_alerts_total{{scope="key",threshold="{threshold}"}} 1.0'
            assert line in text, text[-2000:]


async def admin_call(gw: Gateway, admin: Admin, method: str, path: str, body: Any = None) -> Any:
    payload = b"" if body is None else orjson.dumps(body)
    return await gw.call(path, payload, headers=admin.headers, method=method)


async def test_the_admin_api_sets_reads_and_lifts_budgets_with_their_figures(
    tmp_path: Path,
) -> None:
    async with gateway(tmp_path) as (gw, admin):
        key_id, token = await tenant_and_key(admin, None, {"amount": "0.002"})
        admitted, _ = await spend_until_refused(gw, token)
        await gw.state.accounting.limiter.backend.drain()
        reply = await admin_call(gw, admin, "GET", f"/admin/keys/{key_id}/budget")
        assert reply.status == 200, reply.body
        view = reply.json()
        assert view["budget"] == {
            "amount": "0.002",
            "currency": None,
            "period": "month",
            "mode": "hard",
            "alert_thresholds": [50, 80, 100],
        }
        assert (view["spent_micros"], view["remaining_micros"]) == (
            admitted * COST,
            2000 - admitted * COST,
        )
        assert view["currency"] == "USD" and view["resets_at"] == "2027-02-01T00:00:00Z"
        assert view["spent"] == f"0.{admitted * COST:06d}"

        tenant_path = "/admin/tenants/acme/budget"
        assert (await admin_call(gw, admin, "GET", tenant_path)).json()["budget"] is None
        put = await admin_call(gw, admin, "PUT", tenant_path, {"amount": "5", "period": "none"})
        assert put.status == 200, put.body
        assert put.json()["remaining_micros"] == 5_000_000 and put.json()["resets_at"] is None
        tenant = await admin_call(gw, admin, "GET", "/admin/tenants/acme")
        assert tenant.json()["limits"]["budget"]["amount"] == "5"  # kept in the tenant's limits
        euro = await admin_call(gw, admin, "PUT", tenant_path, {"amount": "5", "currency": "EUR"})
        assert euro.status == 400 and "not the prices' currency USD" in euro.body.decode()
        patched = await admin_call(
            gw,
            admin,
            "PATCH",
            "/admin/tenants/acme",
            {"limits": {"budget": {"amount": "1", "currency": "EUR"}}},
        )
        assert patched.status == 400 and "EUR" in patched.body.decode()
        bad = await admin_call(gw, admin, "PUT", tenant_path, {"amount": "-5"})
        assert bad.status == 400 and "0 or more" in bad.body.decode()
        lifted = await admin_call(gw, admin, "DELETE", f"/admin/keys/{key_id}/budget")
        assert lifted.status == 200 and lifted.json()["budget"] is None
        gw.clock.advance(10)  # past auth.cache_seconds on any other replica; this one forgot
        ok = await gw.call(CHAT, chat("whole", max_tokens=5), headers=bearer(token))
        assert ok.status == 200  # the key's budget lifted, the tenant's (5) has room
        missing = await admin_call(gw, admin, "GET", "/admin/tenants/nobody/budget")
        assert missing.status == 404
        forbidden = await gw.call(
            f"/admin/keys/{key_id}/budget", b"", headers=bearer(token), method="GET"
        )
        assert forbidden.status in (401, 403)
