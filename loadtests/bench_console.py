"""Console benchmark: how long its pages take to load in a real Chromium against a store of
1 million usage ledger rows (one tenant holding a year of them), through a real gateway process.

The store is made with the gateway's own migrations up to the ledger's version 2, filled with
``executemany`` (a year of rows: 80 % for tenant ``acme`` over 5 keys and 3 models, the rest over
9 other tenants), then migrated to the current version, which builds the daily totals from the
rows (the backfill is timed too). A page load is the time from navigation to the view's data
drawn, by the page's own clock (``body[data-ready-ms]``, from ``performance.now()``): HTML, CSS,
JS and every JSON call of the view. The year of usage is timed from the click on Show.

    PYTHONPATH=. .venv/bin/python loadtests/bench_console.py [--rows 1000000] [--loads 15]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sqlite3
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
from playwright.sync_api import Page, sync_playwright

from gateway.database import Database, StorageConfig
from gateway.runtime.migrations import all_migrations
from tests.browser.conftest import CHROMIUM, CHROMIUM_ARGS
from tests.gatewayproc import start_gateway
from tests.integration.auth.conftest import ENV, Admin, admin_key
from tests.simproc import start_sim

DAY = 86400
COLUMNS = (
    "request_id, created_at, day, tenant_id, key_id, model, pool, variant, input_tokens, "
    "output_tokens, cached_tokens, ttft_ms, duration_ms, status, partial"
)


async def migrate(url: str, ledger_version: int | None) -> float:
    db = Database.open(StorageConfig(url=url))
    started = time.perf_counter()
    try:
        await db.migrate(all_migrations(), None if ledger_version is None else {"ledger": 2})
    finally:
        await db.close()
    return time.perf_counter() - started


def fill(path: Path, rows: int, acme_keys: list[str], now: float) -> float:
    """A year of rows up to ``now``, in time order; seconds taken."""
    others = [(f"tenant-{t}", f"key-{t}") for t in range(9)]
    models = ("alpha", "beta", "gamma")
    start = now - 365 * DAY
    step = 365 * DAY / rows

    def generate() -> Any:
        for i in range(rows):
            at = start + i * step
            tenant, key = ("acme", acme_keys[i % 5]) if i % 5 else others[i % 9]
            tokens = 50 + i % 400
            yield (f"r{i}", at, int(at // DAY), tenant, key, models[i % 3], "pd", "stable",
                   tokens, tokens // 4, 0, 12.5, 80.0, 200, 0)  # fmt: skip

    started = time.perf_counter()
    with sqlite3.connect(path) as conn:
        conn.execute("PRAGMA journal_mode=WAL")
        conn.executemany(
            f"INSERT INTO usage_ledger ({COLUMNS}) VALUES ({', '.join('?' * 15)})", generate()
        )
    return time.perf_counter() - started


def timed(loads: int, load: Callable[[int], float | None]) -> dict[str, float]:
    """Each load's time: the page's own figure (``performance.now()``, from navigation or the
    click to the data drawn) where it gives one, else the wall time seen from here."""
    times = []
    for i in range(loads + 1):
        started = time.perf_counter()
        in_page = load(i)
        if i:  # the first load warms the gateway's and the browser's caches
            times.append(in_page if in_page is not None else (time.perf_counter() - started) * 1000)
    times.sort()
    return {
        "p50_ms": statistics.median(times),
        "p95_ms": times[max(0, round(0.95 * len(times)) - 1)],
        "max_ms": times[-1],
    }


def ready_ms(page: Page, view: str) -> float:
    page.wait_for_selector(f'body[data-ready="{view}"]')
    return float(page.get_attribute("body", "data-ready-ms") or "nan")


def page_load(page: Page, url: str, view: str) -> Callable[[int], float | None]:
    def load(i: int) -> float | None:
        page.goto(f"{url}?load={i}#{view}")
        return ready_ms(page, view)

    return load


def year_of_usage(page: Page, today: str, year_ago: str) -> Callable[[int], float | None]:
    def load(i: int) -> float | None:
        page.fill("#usage-from", year_ago)
        page.fill("#usage-to", today)
        page.click("#usage-form button[type=submit]")
        return ready_ms(page, "usage")

    return load


def browse(url: str, tokens: dict[str, str], loads: int) -> dict[str, dict[str, float]]:
    results: dict[str, dict[str, float]] = {}
    today = time.strftime("%Y-%m-%d", time.gmtime())
    year_ago = time.strftime("%Y-%m-%d", time.gmtime(time.time() - 364 * DAY))
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        for role, token in tokens.items():
            context = browser.new_context(viewport={"width": 1366, "height": 900})
            context.add_init_script(
                f"sessionStorage.setItem('pdg.key', {token!r});"
                f"sessionStorage.setItem('pdg.role', {role!r});"
            )
            page = context.new_page()
            views = ("usage", "keys", "routing") if role == "admin" else ("usage", "keys")
            for view in views:
                results[f"{role} {view} (30 days)" if view == "usage" else f"{role} {view}"] = (
                    timed(loads, page_load(page, url + "/console/", view))
                )
            page.goto(url + "/console/#usage")
            page.wait_for_selector('body[data-ready="usage"]')
            results[f"{role} usage, a year"] = timed(loads, year_of_usage(page, today, year_ago))
            context.close()
        browser.close()
    return results


def api_times(url: str, token: str, loads: int) -> dict[str, dict[str, float]]:
    now = time.time()
    today = now - now % DAY + DAY
    headers = {"authorization": f"Bearer {token}"}
    asks = {
        "GET /v1/usage a year, whole days (daily totals)": {"start_time": today - 365 * DAY},
        "GET /v1/usage a year, exact times (ledger rows)": {"start_time": now - 365 * DAY + 1},
    }
    out = {}
    with httpx.Client(base_url=url, headers=headers, timeout=60) as client:
        for name, params in asks.items():
            query = {"scope": "tenant", "group_by": "day,key_id,model", **params}

            def load(i: int, query: dict[str, Any] = query) -> float | None:
                client.get("/v1/usage", params=query).raise_for_status()
                return None

            out[name] = timed(max(3, loads // 3), load)
    return out


async def store_times(url: str, loads: int) -> dict[str, dict[str, float]]:
    """The store's own share, in this process: what the 1 M rows can cost a page."""
    from gateway.accounting.ledger_sql import SqlLedgerStore, UsageQuery

    now = time.time()
    today = now - now % DAY + DAY
    asks = {
        "store: tenant, a year by day x model (whole days)": UsageQuery(
            ("day", "model"), tenant_id="acme", start=today - 365 * DAY, end=today
        ),
        "store: tenant, a year by key x model (whole days)": UsageQuery(
            ("key_id", "model"), tenant_id="acme", start=today - 365 * DAY, end=today
        ),
        "store: every tenant, a year by day x tenant x model": UsageQuery(
            ("day", "tenant_id", "model"), start=today - 365 * DAY, end=today
        ),
        "store: tenant, a year to the second (partial days from rows)": UsageQuery(
            ("day", "model"), tenant_id="acme", start=now - 365 * DAY, end=now
        ),
    }
    db = Database.open(StorageConfig(url=url))
    store = SqlLedgerStore(db)
    out = {}
    try:
        for name, query in asks.items():
            times = []
            for i in range(loads + 1):
                started = time.perf_counter()
                await store.report(query)
                if i:
                    times.append((time.perf_counter() - started) * 1000)
            times.sort()
            out[name] = {
                "p50_ms": statistics.median(times),
                "p95_ms": times[max(0, round(0.95 * len(times)) - 1)],
                "max_ms": times[-1],
            }
    finally:
        await db.close()
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--loads", type=int, default=15)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        run(Path(tmp), args.rows, args.loads)


def run(tmp: Path, rows: int, loads: int) -> None:
    database = tmp / "gateway.db"
    url = f"sqlite:///{database}"
    asyncio.run(migrate(url, ledger_version=2))
    os.environ.update(ENV)
    with start_sim("--no-delay", "--model", "alpha") as sim:
        config = {
            "pools": {"sim": {"urls": [sim.url]}},
            "models": {m: {"pool": "sim"} for m in ("alpha", "beta", "gamma")},
            "storage": {"url": url},
            "auth": {"enabled": True},
            "console": {"enabled": True},
        }
        admin_token = admin_key(url)
        # Keys first (the gateway migrates the store to the current version when it starts,
        # so the rows go in while it is stopped, before the daily totals are built).
        with start_gateway(config, tmp, env=ENV) as gateway:
            admin = Admin(gateway.url, admin_token)
            admin.post("/tenants", {"id": "acme"})
            issued = [admin.post("/tenants/acme/keys", {"name": f"k{i}"}) for i in range(5)]
            admin.close()
        with sqlite3.connect(database) as conn:
            conn.execute("DELETE FROM usage_daily")
            conn.execute("DELETE FROM schema_migrations WHERE component='ledger' AND version=3")
            conn.execute("DROP TABLE usage_daily")
        fill_s = fill(database, rows, [k["id"] for k in issued], time.time())
        backfill_s = asyncio.run(migrate(url, ledger_version=None))
        store = asyncio.run(store_times(url, loads))
        with start_gateway(config, tmp, env=ENV) as gateway:
            pages = browse(gateway.url, {"admin": admin_token, "tenant": issued[0]["key"]}, loads)
            api = api_times(gateway.url, issued[0]["key"], loads)
    print(
        f"{rows:,} ledger rows: filled in {fill_s:.1f} s; daily totals built in {backfill_s:.1f} s"
    )
    print(f"{'page (load to data drawn)':<62} {'p50':>8} {'p95':>8} {'max':>8}")
    for name, t in {**pages, **api, **store}.items():
        print(f"{name:<62} {t['p50_ms']:>6.0f}ms {t['p95_ms']:>6.0f}ms {t['max_ms']:>6.0f}ms")


if __name__ == "__main__":
    main()
