"""The usage ledger's batching writer and its SQL store, on SQLite and on a real PostgreSQL."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path

import pytest

from gateway.accounting import ledger_sql
from gateway.accounting.ledger import Ledger, UsageRow
from gateway.accounting.ledger_sql import SqlLedgerStore, UsageQuery
from gateway.database import Database
from gateway.runtime.migrations import all_migrations

DAY = 86400
T0 = 1_800_000_000.0  # 2027-01-15 08:00 UTC


async def until(condition: Callable[[], bool], deadline: float = 30.0) -> None:
    """Poll for a state (a machine under load may take long), never a fixed sleep."""
    async with asyncio.timeout(deadline):
        while not condition():
            await asyncio.sleep(0.01)


def row(i: int, *, model: str = "m", key: str = "k1", at: float = T0) -> UsageRow:
    return UsageRow(
        created_at=at + i * 0.001,
        request_id=f"r{i}",
        tenant_id="t1",
        key_id=key,
        model=model,
        pool="pd",
        variant=None,
        input_tokens=10 + i,
        output_tokens=i,
        cached_tokens=0,
        ttft_ms=1.5,
        duration_ms=3.0,
        status=200,
        partial=i % 7 == 0,
    )


async def test_every_recorded_row_is_written_in_batches(migrated: Database) -> None:
    store = SqlLedgerStore(migrated)
    ledger = Ledger(store, batch_size=100, interval=0.05)
    await ledger.start()
    for i in range(1234):
        ledger.record(row(i))
        if i % 300 == 0:
            await asyncio.sleep(0)  # let the writer run while rows keep coming
    await ledger.close()
    assert await store.count() == 1234
    assert ledger.written == 1234 and ledger.pending == 0
    [total] = (await store.report(UsageQuery(group_by=()))).rows
    assert total["input_tokens"] == sum(10 + i for i in range(1234))
    assert total["output_tokens"] == sum(range(1234))


class CountingStore(SqlLedgerStore):
    """The real store, noting the size of each batch it is given."""

    def __init__(self, database: Database) -> None:
        super().__init__(database)
        self.batches: list[int] = []

    async def write(self, rows: Sequence[UsageRow]) -> None:
        self.batches.append(len(rows))
        await super().write(rows)


async def test_a_steady_trickle_is_written_once_an_interval_not_chased(migrated: Database) -> None:
    """Rows arriving while a batch is written wait for the next flush: a writer that chased them
    wrote a batch of the few rows that came during each write, over and over."""
    store = CountingStore(migrated)
    ledger = Ledger(store, batch_size=500, interval=0.1)
    await ledger.start()
    loop = asyncio.get_running_loop()
    end, written = loop.time() + 0.6, 0
    while loop.time() < end:
        ledger.record(row(written))
        written += 1
        await asyncio.sleep(0.0005)
    await ledger.close()
    assert await store.count() == written == sum(store.batches)
    # About one batch per interval (6 here, plus the close); chasing made one per write.
    assert len(store.batches) <= 12, store.batches


async def test_rows_wait_while_the_store_fails_then_are_written(database: Database) -> None:
    # No schema yet: every write fails for real (no such table) until the migration runs.
    store = SqlLedgerStore(database)
    ledger = Ledger(store, batch_size=10, interval=0.02)
    await ledger.start()
    for i in range(25):
        ledger.record(row(i))
    await until(lambda: ledger.write_failures > 0)  # the writer has tried, and failed
    assert ledger.pending == 25
    await database.migrate(all_migrations())
    await ledger.close()
    assert await store.count() == 25


async def test_report_groups_by_day_and_model_and_filters(migrated: Database) -> None:
    store = SqlLedgerStore(migrated)
    rows = [
        row(1, model="a"),
        row(2, model="a"),
        row(3, model="b"),
        row(4, model="a", at=T0 + DAY),
        row(5, model="a", key="k2"),
    ]
    await store.write(rows)
    by_day = (await store.report(UsageQuery(group_by=("day", "model"), key_id="k1"))).rows
    assert by_day == [
        {"model": "a", "requests": 2, "input_tokens": 23, "output_tokens": 3,
         "cached_tokens": 0, "cost_micros": 0, "date": "2027-01-15"},
        {"model": "b", "requests": 1, "input_tokens": 13, "output_tokens": 3,
         "cached_tokens": 0, "cost_micros": 0, "date": "2027-01-15"},
        {"model": "a", "requests": 1, "input_tokens": 14, "output_tokens": 4,
         "cached_tokens": 0, "cost_micros": 0, "date": "2027-01-16"},
    ]  # fmt: skip
    in_range = (
        await store.report(UsageQuery(group_by=("key_id",), start=T0, end=T0 + DAY, tenant_id="t1"))
    ).rows
    assert [(r["key_id"], r["requests"]) for r in in_range] == [("k1", 3), ("k2", 1)]


async def test_memory_stays_bounded_while_the_store_is_down_and_no_row_is_lost(
    database: Database, tmp_path: Path
) -> None:
    store = SqlLedgerStore(database)  # no schema yet: every write fails
    spill = tmp_path / "ledger.spill"
    ledger = Ledger(store, batch_size=10, interval=0.02, max_buffered=50, spill_path=spill)
    await ledger.start()
    for i in range(1000):
        ledger.record(row(i))
        assert len(ledger._rows) <= 50
    await asyncio.sleep(0.05)
    assert ledger.pending == 1000 and ledger.spilled >= 950
    assert spill.stat().st_mode & 0o777 == 0o600
    await database.migrate(all_migrations())
    await ledger.close()
    assert await store.count() == 1000
    assert not spill.exists() and ledger.pending == 0


async def test_rows_spilled_by_an_earlier_run_are_written_at_the_next(
    database: Database, tmp_path: Path
) -> None:
    spill = tmp_path / "ledger.spill"
    first = Ledger(SqlLedgerStore(database), batch_size=10, max_buffered=5, spill_path=spill)
    for i in range(30):  # the process dies here: no close
        first.record(row(i))
    spilled = first.spilled
    assert spilled >= 25 and spilled + len(first._rows) == 30
    await database.migrate(all_migrations())
    store = SqlLedgerStore(database)
    second = Ledger(store, batch_size=10, spill_path=spill)
    assert second.pending == spilled
    await second.start()
    await second.close()
    assert await store.count() == spilled


async def test_daily_totals_agree_with_the_rows_over_whole_days(migrated: Database) -> None:
    # Rows across three days, written in several batches (the daily totals add up per batch),
    # anonymous rows among them; whole-day ranges read the totals, others the rows.
    store = SqlLedgerStore(migrated)
    rows = [
        replace(row(i, model="ab"[i % 2], key=f"k{i % 3}", at=T0 + (i % 3) * DAY * 0.7),
                tenant_id=None if i % 5 == 0 else "t1",
                key_id=None if i % 5 == 0 else f"k{i % 3}")
        for i in range(90)
    ]  # fmt: skip
    for start in range(0, 90, 25):
        await store.write(rows[start : start + 25])
    day0 = T0 - T0 % DAY
    for groups in [("day", "tenant_id", "key_id", "model"), ("day",), ("key_id",), ()]:
        for tenant in (None, "t1"):
            whole = UsageQuery(groups, tenant_id=tenant, start=day0, end=day0 + 3 * DAY)
            # A range a second inside the same days covers the same rows but reads them one by one.
            exact = replace(whole, start=day0 + 1e-6, end=day0 + 3 * DAY - 1e-6)
            from_totals, from_rows = await store.report(whole), await store.report(exact)
            assert from_totals == from_rows
            assert sum(r["requests"] for r in from_totals.rows) == sum(
                1 for r in rows if tenant is None or r.tenant_id == tenant
            )
    by_tenant = (await store.report(UsageQuery(("tenant_id",)))).rows
    assert [(r["tenant_id"], r["requests"]) for r in by_tenant] == [(None, 18), ("t1", 72)]


async def test_a_report_is_cut_at_its_bound(
    migrated: Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = SqlLedgerStore(migrated)
    await store.write([row(i, model=f"m{i}") for i in range(5)])
    monkeypatch.setattr(ledger_sql, "MAX_REPORT_ROWS", 3)
    report = await store.report(UsageQuery(("model",)))
    assert len(report.rows) == 3 and report.has_more
    assert not (await store.report(UsageQuery(("day",)))).has_more


async def test_cost_is_stored_and_summed_like_tokens(migrated: Database) -> None:
    """Each row keeps its cost and price version; whole-day and partial-day reports and the
    CSV export sum the cost column exactly (unpriced rows count as 0 in the sums)."""
    store = SqlLedgerStore(migrated)
    rows = [
        replace(row(i), cost_micros=None if i % 5 == 0 else 1_000_003 * i, price_version="USD-x")
        for i in range(50)
    ]
    await store.write(rows)
    expected = sum(r.cost_micros or 0 for r in rows)
    [whole] = (await store.report(UsageQuery(group_by=(), start=T0 - T0 % DAY))).rows
    [part] = (await store.report(UsageQuery(group_by=(), start=T0))).rows
    assert whole["cost_micros"] == part["cost_micros"] == expected
    async with migrated.read() as conn:
        stored = (
            await conn.execute(
                ledger_sql.select(ledger_sql.usage_ledger.c.cost_micros).where(
                    ledger_sql.usage_ledger.c.request_id == "r7"
                )
            )
        ).scalar_one()
    assert stored == 7_000_021
