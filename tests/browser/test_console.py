"""The console in Chromium: sign-in as admin and as tenant, charts that match the ledger, keys
created and revoked, limits and routing weights changed, and one tenant blind to another."""

from __future__ import annotations

import datetime
from pathlib import Path

import httpx
import openai
import pytest
from playwright.sync_api import Page, expect

from tests.browser.conftest import Site, screenshot, sign_in

pytestmark = pytest.mark.timeout(120)


def chart_values(page: Page, field: str) -> dict[tuple[str, str], int]:
    """The numbers the chart drew: each bar's (date, model) -> value."""
    bars = page.locator(f'figure[data-chart="{field}"] rect[data-model]')
    expect(bars.first).to_be_visible()
    found: dict[tuple[str, str], int] = {}
    for bar in bars.all():
        date, model = bar.get_attribute("data-date"), bar.get_attribute("data-model")
        assert date is not None and model is not None
        found[(date, model)] = int(bar.get_attribute("data-value") or 0)
    return found


def ledger_by_day(site: Site, field: str, tenant: str | None = None) -> dict[tuple[str, str], int]:
    where, args = ("WHERE tenant_id = ?", (tenant,)) if tenant else ("", ())
    rows = site.ledger(
        f"SELECT day, model, SUM({field}) FROM usage_ledger {where} GROUP BY day, model", *args
    )
    epoch = datetime.date(1970, 1, 1)
    return {((epoch + datetime.timedelta(days=d)).isoformat(), m): int(v) for d, m, v in rows if v}


def test_admin_sees_every_tenant_and_charts_match_the_ledger(
    page: Page, site: Site, tmp_path: Path
) -> None:
    sign_in(page, site, site.admin_token)
    expect(page.get_by_text("Signed in with an admin key")).to_be_visible()
    expect(page.get_by_role("button", name="Routing")).to_be_visible()
    assert chart_values(page, "input_tokens") == ledger_by_day(site, "input_tokens")
    assert chart_values(page, "output_tokens") == ledger_by_day(site, "output_tokens")
    # Requests: one ledger row each.
    assert chart_values(page, "requests") == ledger_by_day(site, "1")
    assert sum(chart_values(page, "requests").values()) == site.requests_made
    table = page.locator("#usage-table tbody")
    expect(table).to_contain_text("acme")
    expect(table).to_contain_text("globex")
    total_in = site.ledger("SELECT SUM(input_tokens) FROM usage_ledger")[0][0]
    expect(page.locator('tfoot [data-total="input_tokens"]')).to_have_text(f"{total_in:,}")
    screenshot(page, "usage-admin", tmp_path)
    # The CSV holds what the table shows.
    with page.expect_download() as download:
        page.get_by_role("button", name="Download CSV").click()
    lines = Path(download.value.path()).read_text().splitlines()
    header = lines[0].split(",")  # the report's columns, money included (issue 37)
    tokens = {"tenant_id", "model", "requests", "input_tokens", "output_tokens", "cached_tokens"}
    assert tokens | {"date", "cost_micros", "cost", "currency"} <= set(header)
    assert header[3] == "input_tokens"
    assert sum(int(line.split(",")[3]) for line in lines[1:]) == total_in


def test_a_tenant_sees_its_own_tenant_only(page: Page, site: Site, tmp_path: Path) -> None:
    sign_in(page, site, site.acme_keys[0]["key"])
    expect(page.get_by_text("Signed in with a tenant key")).to_be_visible()
    expect(page.get_by_role("button", name="Routing")).to_be_hidden()
    assert chart_values(page, "input_tokens") == ledger_by_day(site, "input_tokens", "acme")
    assert chart_values(page, "output_tokens") == ledger_by_day(site, "output_tokens", "acme")
    table = page.locator("#usage-table tbody")
    for key in site.acme_keys:
        expect(table).to_contain_text(key["id"])
    screenshot(page, "usage-tenant", tmp_path)
    page.get_by_role("button", name="Keys").click()
    rows = page.locator("#keys-table tbody tr")
    expect(rows).to_have_count(len(site.acme_keys))
    expect(page.get_by_role("button", name="Create key")).to_be_hidden()
    screenshot(page, "keys-tenant", tmp_path)
    # Nothing of the other tenant anywhere on either page, nor through the API with this key.
    globex = site.globex_key["id"]
    for view in ("usage", "keys"):
        page.goto(site.console + "#" + view)
        page.wait_for_load_state("networkidle")
        assert globex not in page.content() and "globex" not in page.content()
    answers = page.evaluate(
        """async () => Promise.all(["/admin/usage", "/admin/tenants/globex/keys",
            "/admin/routing", "/v1/usage?scope=tenant&group_by=key_id"].map(async (path) => {
              const r = await fetch(path, {headers: {authorization:
                "Bearer " + sessionStorage.getItem("pdg.key")}});
              return [r.status, await r.text()];
            }))"""
    )
    assert [status for status, _ in answers] == [403, 403, 403, 200]
    assert globex not in answers[3][1]


def test_an_admin_creates_and_revokes_a_key_and_edits_limits(
    page: Page, site: Site, tmp_path: Path
) -> None:
    sign_in(page, site, site.admin_token)
    page.get_by_role("button", name="Keys").click()
    page.get_by_role("region", name="Keys").get_by_label("Tenant").select_option("acme")
    page.get_by_label("Name").fill("from-the-browser")
    page.get_by_label("Expires after (days, empty: never)").fill("30")
    page.get_by_role("button", name="Create key").click()
    secret = page.get_by_label("Secret")
    expect(secret).to_be_visible()
    token = secret.input_value()
    assert token.startswith("sk-pdg-")
    row = page.locator("#keys-table tbody tr", has_text="from-the-browser")
    expect(row.locator("[data-state]")).to_have_text("active")
    screenshot(page, "keys-admin", tmp_path)
    page.get_by_role("button", name="Done").click()
    expect(secret).to_be_hidden()
    assert token not in page.content()  # shown once, gone from the page afterwards
    # The new key works for real, through the gateway, until revoked in the console.
    client = openai.OpenAI(base_url=site.gateway.base_url, api_key=token, max_retries=0)
    client.chat.completions.create(
        model="beta", messages=[{"role": "user", "content": "hi"}], max_tokens=2
    )
    page.once("dialog", lambda dialog: dialog.accept())
    row.get_by_role("button", name="Revoke from-the-browser").click()
    expect(row.locator("[data-state]")).to_have_text("revoked")
    with pytest.raises(openai.AuthenticationError):
        client.chat.completions.create(
            model="beta", messages=[{"role": "user", "content": "hi"}], max_tokens=2
        )
    # Limits: the tenant's, then one key's, saved through the admin API.
    page.get_by_label("Requests per minute").fill("120")
    page.get_by_role("button", name="Save limits").click()
    expect(page.get_by_role("status")).to_contain_text("Limits of tenant acme saved")
    assert site.admin.get("/tenants/acme")["limits"]["requests_per_minute"] == 120
    ci = site.acme_keys[0]
    page.get_by_role("button", name=f"Edit limits of {ci['name']}").click()
    page.get_by_role("spinbutton", name="Tokens per day").fill("5000")
    page.get_by_role("button", name="Save limits").click()
    expect(page.get_by_role("status")).to_contain_text(f"Limits of key {ci['name']} saved")
    assert site.admin.get(f"/keys/{ci['id']}")["limits"] == {"daily_tokens": 5000}


def test_routing_shows_pools_and_variants_and_sets_a_weight(
    page: Page, site: Site, tmp_path: Path
) -> None:
    sign_in(page, site, site.admin_token)
    page.get_by_role("button", name="Routing").click()
    alpha = page.get_by_role("region", name="Model alpha")
    expect(alpha.locator('tr[data-variant="canary"]')).to_contain_text("sim-canary")
    expect(page.locator('tr[data-pool="sim"]')).to_contain_text("closed")
    expect(page.locator('tr[data-load="sim"]')).to_contain_text("no signal")
    expect(page.locator("#routing-queue")).to_contain_text("Flow control is off")
    expect(alpha).to_contain_text("Canary: baseline stable")
    screenshot(page, "routing", tmp_path)
    weight = page.get_by_label("Weight of alpha variant canary")
    weight.fill("25")
    alpha.locator('tr[data-variant="canary"]').get_by_role("button", name="Set").click()
    expect(page.get_by_role("status")).to_contain_text("alpha/canary set to 25")
    shown = site.admin.get("/routing")["models"]["alpha"]["variants"]["canary"]
    assert shown["weight"] == 25


def test_only_the_console_files_are_public(site: Site) -> None:
    url = site.gateway.url
    for path in ("/console", "/console/", "/console/console.js", "/console/console.css"):
        response = httpx.get(url + path)
        assert response.status_code == 200, path
        assert "script-src 'self'" in response.headers["content-security-policy"]
        assert "set-cookie" not in response.headers
    for path in ("/console/other.js", "/console/../v1/keys", "/v1/keys", "/admin/routing"):
        assert httpx.get(url + path).status_code == 401, path
