"""Prices set through the admin API, in the gateway's database (SQLite or PostgreSQL).

``price_overrides`` holds what is in force, one row per model (``variant`` '') or variant;
``price_changes`` every set and clear, in order, never updated after. A change's id is its
price version (``USD-admin-7``), so every ledger row's ``price_version`` leads to the change
that priced it, whoever set it and when::

    store = PriceStore(database)
    override = await store.put("llama-8b", None, "USD", price_parts(spec), by="key-id", now=t)
    await store.overrides()       # every replica reads these (gateway/accounting/price_book.py)
    await store.clear("llama-8b", None, by="key-id", now=t)   # the config's price is back
"""

from __future__ import annotations

from sqlalchemy import BigInteger, Column, Float, Integer, MetaData, Table, Text, text
from sqlalchemy.ext.asyncio import AsyncConnection

from gateway.accounting.prices import Price, PriceOverride
from gateway.database.database import Database
from gateway.database.migrations import Migration

_PRICE_COLUMNS = """
    currency TEXT NOT NULL,
    input_micros BIGINT NOT NULL,
    cached_input_micros BIGINT NOT NULL,
    output_micros BIGINT NOT NULL,
    batch_discount_ppm BIGINT NOT NULL
"""
_CHANGES = """
    model TEXT NOT NULL,
    variant TEXT NOT NULL,
    action TEXT NOT NULL,
    version TEXT,
    at DOUBLE PRECISION NOT NULL,
    by_key TEXT,
    currency TEXT,
    input_micros BIGINT,
    cached_input_micros BIGINT,
    output_micros BIGINT,
    batch_discount_ppm BIGINT
"""

PRICES_MIGRATIONS = (
    Migration(
        "prices",
        1,
        "prices set through the admin API: those in force, and every change",
        (),
        postgresql=(
            f"""CREATE TABLE price_overrides (
                model TEXT NOT NULL, variant TEXT NOT NULL, {_PRICE_COLUMNS},
                version TEXT NOT NULL, set_at DOUBLE PRECISION NOT NULL, set_by TEXT,
                PRIMARY KEY (model, variant))""",
            f"CREATE TABLE price_changes (id BIGSERIAL PRIMARY KEY, {_CHANGES})",
        ),
        sqlite=(
            f"""CREATE TABLE price_overrides (
                model TEXT NOT NULL, variant TEXT NOT NULL, {_PRICE_COLUMNS},
                version TEXT NOT NULL, set_at DOUBLE PRECISION NOT NULL, set_by TEXT,
                PRIMARY KEY (model, variant))""",
            f"CREATE TABLE price_changes (id INTEGER PRIMARY KEY AUTOINCREMENT, {_CHANGES})",
        ),
    ),
)

metadata = MetaData()

price_changes = Table(
    "price_changes",
    metadata,
    Column("id", BigInteger().with_variant(Integer, "sqlite"), primary_key=True),
    Column("model", Text, nullable=False),
    Column("variant", Text, nullable=False),
    Column("action", Text, nullable=False),
    Column("version", Text),
    Column("at", Float, nullable=False),
    Column("by_key", Text),
    Column("currency", Text),
    Column("input_micros", BigInteger),
    Column("cached_input_micros", BigInteger),
    Column("output_micros", BigInteger),
    Column("batch_discount_ppm", BigInteger),
)

_UPSERT = text(
    """INSERT INTO price_overrides (model, variant, currency, input_micros, cached_input_micros,
        output_micros, batch_discount_ppm, version, set_at, set_by)
    VALUES (:model, :variant, :currency, :input, :cached, :output, :discount, :version, :at, :by)
    ON CONFLICT (model, variant) DO UPDATE SET currency = excluded.currency,
        input_micros = excluded.input_micros, cached_input_micros = excluded.cached_input_micros,
        output_micros = excluded.output_micros, batch_discount_ppm = excluded.batch_discount_ppm,
        version = excluded.version, set_at = excluded.set_at, set_by = excluded.set_by"""
)
_SELECT = text(
    """SELECT model, variant, currency, input_micros, cached_input_micros, output_micros,
        batch_discount_ppm, version, set_at, set_by FROM price_overrides ORDER BY model, variant"""
)


def version_of(currency: str, change_id: int) -> str:
    """The price version of the change ``change_id``: unique, and never a config price's
    (those are ``USD-`` and twelve hex digits)."""
    return f"{currency}-admin-{change_id}"


class PriceStore:
    def __init__(self, database: Database) -> None:
        self.db = database

    async def overrides(self) -> list[PriceOverride]:
        """Every price in force from the API, by model then variant."""
        async with self.db.read() as conn:
            rows = (await conn.execute(_SELECT)).all()
        return [
            PriceOverride(
                model=model,
                variant=variant or None,
                currency=currency,
                price=Price(int(inp), int(cached), int(out), int(discount), version),
                set_at=float(at),
                set_by=by,
            )
            for model, variant, currency, inp, cached, out, discount, version, at, by in rows
        ]

    async def put(
        self,
        model: str,
        variant: str | None,
        currency: str,
        parts: tuple[int, int, int, int],
        *,
        by: str | None,
        now: float,
    ) -> PriceOverride:
        """Set the entry's price (replacing one set before), as a new change and version."""
        async with self.db.transaction() as conn:
            change = await _change(conn, model, variant, "set", now, by, currency, parts)
            version = version_of(currency, change)
            await conn.execute(
                price_changes.update().where(price_changes.c.id == change).values(version=version)
            )
            inp, cached, out, discount = parts
            await conn.execute(
                _UPSERT,
                {
                    "model": model, "variant": variant or "", "currency": currency,
                    "input": inp, "cached": cached, "output": out, "discount": discount,
                    "version": version, "at": now, "by": by,
                },
            )  # fmt: skip
        return PriceOverride(model, variant, currency, Price(*parts, version), now, by)

    async def clear(self, model: str, variant: str | None, *, by: str | None, now: float) -> bool:
        """Remove the entry's API price (the config's, if any, applies again); False if none."""
        async with self.db.transaction() as conn:
            gone = await conn.execute(
                text("DELETE FROM price_overrides WHERE model = :model AND variant = :variant"),
                {"model": model, "variant": variant or ""},
            )
            if not gone.rowcount:
                return False
            await _change(conn, model, variant, "clear", now, by, None, None)
        return True


async def _change(
    conn: AsyncConnection,
    model: str,
    variant: str | None,
    action: str,
    now: float,
    by: str | None,
    currency: str | None,
    parts: tuple[int, int, int, int] | None,
) -> int:
    """Append one change; its id (the order of changes, and the version of a set)."""
    inp, cached, out, discount = parts or (None, None, None, None)
    inserted = await conn.execute(
        price_changes.insert()
        .values(
            model=model, variant=variant or "", action=action, at=now, by_key=by,
            currency=currency, input_micros=inp, cached_input_micros=cached, output_micros=out,
            batch_discount_ppm=discount,
        )
        .returning(price_changes.c.id)
    )  # fmt: skip
    return int(inserted.scalar_one())
