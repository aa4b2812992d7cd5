"""The web console in a real Chromium (Debian's, driven by Playwright) against a real gateway
process in front of the simulator, with real keys, real requests and the real usage ledger."""

from __future__ import annotations

import os
import sqlite3
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import openai
import pytest
from playwright.sync_api import Browser, Page, sync_playwright

from tests.gatewayproc import GatewayProcess, start_gateway
from tests.integration.auth.conftest import ENV, Admin, admin_key
from tests.simproc import SimProcess, start_sim

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking"]
SCREENSHOTS_ENV = "PD_CONSOLE_SCREENSHOTS"
"""A folder (docs/console) to write the README's screenshots into; unset: the test's tmp dir."""


@dataclass
class Site:
    gateway: GatewayProcess
    database: Path
    admin_token: str
    admin: Admin
    acme_keys: list[dict[str, Any]]
    globex_key: dict[str, Any]
    requests_made: int

    @property
    def console(self) -> str:
        return self.gateway.url + "/console/"

    def ledger(self, sql: str, *args: Any) -> list[tuple[Any, ...]]:
        """What the ledger holds, read from the store's file (not through the gateway)."""
        with sqlite3.connect(self.database) as conn:
            return conn.execute(sql, args).fetchall()


@pytest.fixture(scope="package")
def sim() -> Iterator[SimProcess]:
    with start_sim("--no-delay", "--model", "alpha", "--model", "beta") as process:
        yield process


def console_config(sim_url: str, database: Path) -> dict[str, Any]:
    canary = {"baseline": "stable", "min_requests": 5}
    return {
        "pools": {
            "sim": {"urls": [sim_url], "health": {"interval": 0.5, "timeout": 5.0}},
            "sim-canary": {"urls": [sim_url], "health": {"interval": 0.5, "timeout": 5.0}},
        },
        "models": {
            "alpha": {
                "variants": {
                    "stable": {"weight": 90, "pools": {"colocated": "sim"}},
                    "canary": {"weight": 10, "pools": {"colocated": "sim-canary"}},
                },
                "canary": canary,
            },
            "beta": {"pool": "sim"},
        },
        "storage": {"url": f"sqlite:///{database}"},
        "auth": {"enabled": True},
        "accounting": {"ledger_interval": 0.05},
        "console": {"enabled": True},
    }


def _ask(key: str, base_url: str, model: str, max_tokens: int) -> None:
    client = openai.OpenAI(base_url=base_url, api_key=key, max_retries=0)
    client.chat.completions.create(
        model=model, messages=[{"role": "user", "content": "hello " * max_tokens}],
        max_tokens=max_tokens,
    )  # fmt: skip


@pytest.fixture(scope="package")
def site(sim: SimProcess, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Site]:
    tmp = tmp_path_factory.mktemp("console")
    database = tmp / "gateway.db"
    with start_gateway(console_config(sim.url, database), tmp, env=ENV) as gateway:
        token = admin_key(f"sqlite:///{database}")
        admin = Admin(gateway.url, token)
        admin.post(
            "/tenants", {"id": "acme", "name": "Acme", "limits": {"tokens_per_minute": 90000}}
        )
        admin.post("/tenants", {"id": "globex", "name": "Globex"})
        acme = [admin.post("/tenants/acme/keys", {"name": n}) for n in ("ci", "batch")]
        globex = admin.post("/tenants/globex/keys", {"name": "globex-prod"})
        # Real requests through the gateway: different sizes, both models, both tenants.
        made = 0
        for i in range(12):
            _ask(acme[i % 2]["key"], gateway.base_url, "alpha" if i % 3 else "beta", 3 + i)
            made += 1
        for i in range(4):
            _ask(globex["key"], gateway.base_url, "beta", 20 + i)
            made += 1
        result = Site(gateway, database, token, admin, acme, globex, made)
        _wait_for_ledger(result)
        try:
            yield result
        finally:
            admin.close()


def _wait_for_ledger(site: Site, timeout: float = 10) -> None:
    deadline = time.monotonic() + timeout
    while site.ledger("SELECT COUNT(*) FROM usage_ledger")[0][0] < site.requests_made:
        if time.monotonic() > deadline:
            raise AssertionError("the ledger did not receive every request's row")
        time.sleep(0.05)


@pytest.fixture(scope="package")
def browser() -> Iterator[Browser]:
    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            yield chromium
        finally:
            chromium.close()


@pytest.fixture
def page(browser: Browser) -> Iterator[Page]:
    """A fresh tab (its own sessionStorage) of a laptop-sized window."""
    context = browser.new_context(viewport={"width": 1366, "height": 900})
    tab = context.new_page()
    errors: list[str] = []
    tab.on("pageerror", lambda err: errors.append(str(err)))
    tab.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    try:
        yield tab
    finally:
        context.close()
    # No script error and no CSP violation (either would show on the page's console).
    assert [e for e in errors if "401" not in e and "403" not in e] == []


def screenshot(page: Page, name: str, tmp_path: Path) -> Path:
    folder = Path(os.environ.get(SCREENSHOTS_ENV) or tmp_path)
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{name}.png"
    page.screenshot(path=str(path), full_page=True)
    return path


def sign_in(page: Page, site: Site, token: str) -> None:
    page.goto(site.console)
    page.get_by_label("API key").fill(token)
    page.get_by_role("button", name="Sign in").click()
    page.get_by_role("button", name="Sign out").wait_for()
