"""With API keys: limits per key and per tenant (values from the key, else its tenant, else the
config), and the usage reports, /v1/usage for the caller and /admin/usage for operators."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest

from tests.gatewayproc import start_gateway
from tests.integration.auth.conftest import ENV, Admin, admin_key
from tests.integration.limits.limitsetup import MODEL, limited_config, no_delay_sim


def ask(key: str, base_url: str, max_tokens: int = 4) -> Any:
    client = openai.OpenAI(base_url=base_url, api_key=key, max_retries=0)
    return client.chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": "hi"}], max_tokens=max_tokens
    )


def usage(url: str, key: str, path: str = "/v1/usage", **params: str) -> list[dict[str, Any]]:
    response = httpx.get(
        url + path, params=params, headers={"Authorization": f"Bearer {key}"}, timeout=10
    )
    assert response.status_code == 200, response.text
    data: list[dict[str, Any]] = response.json()["data"]
    return data


def test_key_and_tenant_limits_and_usage_reports(tmp_path: Path) -> None:
    database_url = f"sqlite:///{tmp_path}/gateway.db"
    limits = {"defaults": {"requests_per_minute": 1000, "daily_tokens": 10_000_000}}
    with no_delay_sim() as sim:
        cfg = limited_config(sim.url, tmp_path, limits=limits, auth={"enabled": True})
        cfg["accounting"] = {"ledger_interval": 0.05}
        with start_gateway(cfg, tmp_path, env=ENV) as gateway:
            operator = admin_key(database_url)
            admin = Admin(gateway.url, operator)
            admin.post("/tenants", {"id": "acme", "limits": {"requests_per_minute": 3}})
            admin.post("/tenants", {"id": "other"})
            tight = admin.post(
                "/tenants/acme/keys", {"name": "tight", "limits": {"requests_per_minute": 2}}
            )
            loose = admin.post("/tenants/acme/keys", {"name": "loose"})
            stranger = admin.post("/tenants/other/keys", {"name": "s"})
            ask(tight["key"], gateway.base_url)
            ask(tight["key"], gateway.base_url)
            with pytest.raises(openai.RateLimitError, match="on key"):
                ask(tight["key"], gateway.base_url)  # the key's own 2
            ask(loose["key"], gateway.base_url)  # the tenant's 3rd
            with pytest.raises(openai.RateLimitError, match="on tenant acme"):
                ask(loose["key"], gateway.base_url)
            for _ in range(5):  # another tenant: only the config's 1000
                ask(stranger["key"], gateway.base_url, max_tokens=6)

            # The ledger writes in batches: poll until the last request's row is there.
            deadline = time.monotonic() + 30
            while sum(r["requests"] for r in usage(gateway.url, stranger["key"])) < 5:
                assert time.monotonic() < deadline, "the ledger never wrote the rows"
                time.sleep(0.05)
            mine = usage(gateway.url, tight["key"])
            assert [(r["model"], r["requests"], r["output_tokens"]) for r in mine] == [
                (MODEL, 2, 8)
            ]
            assert mine[0]["date"] == time.strftime("%Y-%m-%d", time.gmtime())
            theirs = usage(gateway.url, stranger["key"])
            assert [(r["requests"], r["output_tokens"]) for r in theirs] == [(5, 30)]
            report = usage(
                gateway.url,
                operator,
                "/admin/usage",
                group_by="tenant_id",
                end_time=str(time.time() + 1),
            )
            assert {r["tenant_id"]: r["requests"] for r in report} == {"acme": 3, "other": 5}
            forbidden = httpx.get(
                gateway.url + "/admin/usage", headers={"Authorization": f"Bearer {loose['key']}"}
            )
            assert forbidden.status_code == 403
            admin.close()
