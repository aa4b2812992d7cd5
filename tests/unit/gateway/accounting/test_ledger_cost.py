"""Cost on the ledger, on SQLite and on a real PostgreSQL: stored with each row and its price
version, summed in the daily totals and the reports exactly to prices x tokens."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import replace
from decimal import ROUND_HALF_UP, Decimal

from gateway.accounting.ledger import Ledger, UsageRow
from gateway.accounting.ledger_sql import SqlLedgerStore, UsageQuery
from gateway.accounting.prices import PricesConfig, PriceTable, cost
from gateway.database import Database
from gateway.runtime.migrations import all_migrations

DAY = 86400
T0 = 1_800_000_000.0
PRICES = {
    "a": {"input": "0.15", "cached_input": "0.075", "output": "0.60"},
    "b": {"input": "3", "output": "15.000001"},
}
TABLE = PriceTable.build(PricesConfig.model_validate({"currency": "USD", "models": PRICES}))


def exact_micros(model: str, prompt: int, cached: int, output: int) -> int:
    """Prices x tokens from the config's own strings, in Decimal, rounded half up per row."""
    p = PRICES[model]
    cached_price = Decimal(p.get("cached_input", p["input"]))
    units = (
        (prompt - cached) * Decimal(p["input"])
        + cached * cached_price
        + output * Decimal(p["output"])
    ) / 1_000_000
    return int((units * 1_000_000).quantize(Decimal(1), rounding=ROUND_HALF_UP))


def priced_row(i: int) -> UsageRow:
    model = "ab"[i % 2]
    prompt, output = 17 + 13 * i, 3 * i
    cached = (prompt // 2) if i % 3 == 0 else 0
    price = TABLE.price(model, None)
    assert price is not None
    return UsageRow(
        created_at=T0 + (i % 4) * DAY * 0.6,
        request_id=f"r{i}",
        tenant_id="t1",
        key_id=f"k{i % 3}",
        model=model,
        pool="pd",
        variant=None,
        input_tokens=prompt,
        output_tokens=output,
        cached_tokens=cached,
        ttft_ms=1.0,
        duration_ms=2.0,
        status=499 if i % 5 == 0 else 200,  # cut streams: billed what they used
        partial=i % 5 == 0,
        cost_micros=cost(price, input_tokens=prompt, cached_tokens=cached, output_tokens=output),
        price_version=price.version,
    )


async def test_costs_sum_to_prices_times_tokens_in_every_report(migrated: Database) -> None:
    store = SqlLedgerStore(migrated)
    rows = [priced_row(i) for i in range(200)]
    unpriced = replace(priced_row(200), model="c", cost_micros=None, price_version=None)
    for start in range(0, len(rows), 30):
        await store.write(rows[start : start + 30])
    await store.write([unpriced])
    want = sum(
        exact_micros(r.model, r.input_tokens, r.cached_tokens, r.output_tokens) for r in rows
    )
    assert sum(r.cost_micros or 0 for r in rows) == want
    day0 = T0 - T0 % DAY
    for groups in [("day", "tenant_id", "key_id", "model"), ("model",), ("key_id",), ()]:
        whole = UsageQuery(groups, start=day0, end=day0 + 4 * DAY)  # the daily totals
        exact = replace(whole, start=day0 + 1e-6, end=day0 + 4 * DAY - 1e-6)  # the rows
        for query in (whole, exact):
            report = (await store.report(query)).rows
            assert sum(r["cost_micros"] for r in report) == want, (groups, query)
    by_model = {r["model"]: r for r in (await store.report(UsageQuery(("model",)))).rows}
    assert by_model["c"]["cost_micros"] == 0 and by_model["c"]["requests"] == 1
    async with migrated.read() as conn:
        stored = (
            await conn.exec_driver_sql(
                "SELECT model, cost_micros, price_version FROM usage_ledger ORDER BY id"
            )
        ).all()
    assert [tuple(s) for s in stored[:2]] == [
        (r.model, r.cost_micros, r.price_version) for r in rows[:2]
    ]
    assert stored[-1][1:] == (None, None)


async def test_rows_from_before_prices_keep_no_cost_after_the_migration(
    database: Database,
) -> None:
    await database.migrate(all_migrations(), {"ledger": 4})
    async with database.transaction() as conn:
        await conn.exec_driver_sql("INSERT INTO usage_daily VALUES (1, 't', 'k', 'a', 2, 10, 5, 0)")
    await database.migrate(all_migrations())
    store = SqlLedgerStore(database)
    await store.write([replace(priced_row(1), created_at=DAY * 1.5)])
    [total] = (await store.report(UsageQuery((), start=DAY, end=2 * DAY))).rows
    assert total["requests"] == 3
    assert total["cost_micros"] == priced_row(1).cost_micros


def test_the_highest_price_covers_every_variant_for_a_reservation() -> None:
    prices = PriceTable.build(
        PricesConfig.model_validate(
            {
                "currency": "USD",
                "models": {
                    "v": {
                        "input": "1",
                        "output": "5",
                        "variants": {"canary": {"input": "2", "output": "3"}},
                    }
                },
            }
        )
    )
    top = prices.highest("v")
    assert top is not None and (top.input, top.output) == (2_000_000, 5_000_000)
    usage = {"input_tokens": 1000, "cached_tokens": 0, "output_tokens": 200}
    for variant in (None, "canary"):
        price = prices.price("v", variant)
        assert price is not None and cost(price, **usage) <= cost(top, **usage)
    assert prices.highest("unpriced") is None


async def test_flushes_at_once_write_each_row_once() -> None:
    class SlowStore:
        def __init__(self) -> None:
            self.rows: list[UsageRow] = []

        async def write(self, rows: Sequence[UsageRow]) -> None:
            await asyncio.sleep(0.01)  # the other flush runs meanwhile
            self.rows += rows

    store = SlowStore()
    ledger = Ledger(store, batch_size=10, interval=3600)
    for i in range(25):
        ledger.record(priced_row(i))
    assert all(await asyncio.gather(ledger.flush(), ledger.flush(), ledger.flush()))
    assert sorted(r.request_id for r in store.rows) == sorted(f"r{i}" for i in range(25))
