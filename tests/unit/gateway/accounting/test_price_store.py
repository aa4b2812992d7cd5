"""Prices set through the API, in the store (SQLite and a real PostgreSQL), and the book that lays
them over the config's on each replica."""

from __future__ import annotations

import asyncio
import logging

import pytest
from sqlalchemy import text

from gateway.accounting.price_book import PriceBook, entries, override_problem
from gateway.accounting.price_store import PriceStore
from gateway.accounting.prices import PricesConfig, PriceSpec, PriceTable, price_parts
from gateway.database import Database

CONFIG = PricesConfig.model_validate(
    {
        "currency": "USD",
        "models": {
            "m": {"input": "1", "output": "2", "variants": {"c": {"input": "3", "output": "4"}}}
        },
    }
)
SPEC = PriceSpec.model_validate({"currency": "USD", "input": "0.15", "output": "0.6"})
MODELS = {"m": {"c", "d"}}


async def test_set_replace_and_clear_each_a_change_with_its_own_version(migrated: Database) -> None:
    store = PriceStore(migrated)
    first = await store.put("m", None, "USD", price_parts(SPEC), by="k1", now=10.0)
    second = await store.put("m", None, "USD", (1, 1, 1, 0), by="k2", now=20.0)
    canary = await store.put("m", "c", "USD", (5, 5, 5, 0), by=None, now=30.0)
    assert first.price.version != second.price.version
    assert {first.price.version, second.price.version, canary.price.version} <= {
        f"USD-admin-{i}" for i in (1, 2, 3)
    }
    assert await store.overrides() == [second, canary]  # the model's replaced, by model, variant
    assert await store.clear("m", None, by="k3", now=40.0) is True
    assert await store.clear("m", None, by="k3", now=41.0) is False  # nothing to clear
    assert await store.overrides() == [canary]
    async with migrated.read() as conn:
        changes = (
            await conn.execute(
                text("SELECT action, version, by_key FROM price_changes ORDER BY id")
            )
        ).all()
    assert [tuple(c) for c in changes] == [
        ("set", first.price.version, "k1"),
        ("set", second.price.version, "k2"),
        ("set", canary.price.version, None),
        ("clear", None, "k3"),
    ]


async def test_concurrent_sets_of_one_entry_leave_one_row_and_every_change(
    migrated: Database,
) -> None:
    store = PriceStore(migrated)
    puts = [store.put("m", None, "USD", (i, i, i, 0), by=None, now=float(i)) for i in range(8)]
    done = await asyncio.gather(*puts)
    [row] = await store.overrides()
    assert row in done  # one of them, whole (never a mix of two)
    async with migrated.read() as conn:
        assert (await conn.execute(text("SELECT COUNT(*) FROM price_changes"))).scalar() == 8


async def test_the_book_lays_the_store_over_the_config_and_a_reload_keeps_it(
    migrated: Database,
) -> None:
    book = PriceBook(PriceTable.build(CONFIG))
    store = PriceStore(migrated)
    await book.start(store, interval=0.01)
    try:
        override = await store.put("m", None, "USD", price_parts(SPEC), by=None, now=1.0)
        async with asyncio.timeout(10):  # its own poll picks the change up
            while book.table.price("m", None) != override.price:
                await asyncio.sleep(0.01)
        variant = book.table.price("m", "c")
        assert variant is not None and variant.input == 3_000_000  # the config's, kept
        book.configure(PriceTable.build(PricesConfig()))
        assert book.table.price("m", None) == override.price
        assert book.table.currency == "USD"  # from the override, the config having none
    finally:
        await book.stop()


async def test_a_store_that_cannot_be_read_keeps_the_last_prices(
    migrated: Database, caplog: pytest.LogCaptureFixture
) -> None:
    book = PriceBook(PriceTable.build(CONFIG))
    store = PriceStore(migrated)
    override = await store.put("m", None, "USD", price_parts(SPEC), by=None, now=1.0)
    await book.start(store, interval=0.01)
    await book.stop()
    assert book.table.price("m", None) == override.price
    async with migrated.transaction() as conn:
        await conn.execute(text("DROP TABLE price_overrides"))
    with caplog.at_level(logging.ERROR):
        await book.start(store, interval=0.01)
        await asyncio.sleep(0.1)  # several failed reads: logged once
        await book.stop()
    assert book.table.price("m", None) == override.price
    assert sum("cannot be read" in r.message for r in caplog.records) == 1


def test_problems_are_named_as_config_problems_are() -> None:
    book = PriceBook(PriceTable.build(CONFIG))
    assert override_problem(book, MODELS, "m", None, SPEC) is None
    assert override_problem(book, MODELS, "m", "d", SPEC) is None
    assert override_problem(book, MODELS, "x", None, SPEC) == (
        "prices: no such model in models: 'x'",
        "model",
    )
    assert override_problem(book, MODELS, "m", "z", SPEC)[1] == "variant"  # type: ignore[index]
    euro = SPEC.model_copy(update={"currency": "EUR"})
    assert override_problem(book, MODELS, "m", None, euro)[1] == "currency"  # type: ignore[index]


def test_entries_say_where_each_price_comes_from() -> None:
    book = PriceBook(PriceTable.build(CONFIG))
    shown = entries(book, MODELS)
    assert [(e["model"], e["variant"], e["source"]) for e in shown] == [
        ("m", None, "config"),
        ("m", "c", "config"),
    ]
    assert shown[0]["input"] == "1" and shown[1]["output"] == "4"
