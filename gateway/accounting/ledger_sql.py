"""The usage ledger in the shared store (SQLite or PostgreSQL): its migrations, table and queries.

``day`` (UTC day number) is stored with each row so both backends group by day alike, and the
usage reports group in SQL rather than reading rows back. Reports over whole days read the daily
totals (``daily.py``), others the rows, bounded by day so the (tenant|key, day) indexes narrow
the scan; either way at most ``MAX_REPORT_ROWS`` groups come back.
"""

from __future__ import annotations

import datetime
import math
from collections.abc import Sequence
from dataclasses import fields, replace
from typing import Any

from sqlalchemy import (
    BigInteger,
    Boolean,
    Column,
    Float,
    Integer,
    MetaData,
    Table,
    Text,
    func,
    select,
)
from sqlalchemy.ext.asyncio import AsyncConnection
from sqlalchemy.sql import Select

from gateway.accounting import daily
from gateway.accounting.ledger import UsageRow
from gateway.database.database import Database
from gateway.database.migrations import Migration
from gateway.values import value

DAY = daily.DAY
MAX_REPORT_ROWS = 10_000
"""A year of days x 27 models, or 10 000 keys: a report larger than this is cut (``has_more``)."""

_COLUMNS = """
    request_id TEXT NOT NULL,
    created_at DOUBLE PRECISION NOT NULL,
    day INTEGER NOT NULL,
    tenant_id TEXT,
    key_id TEXT,
    model TEXT NOT NULL,
    pool TEXT,
    variant TEXT,
    input_tokens BIGINT NOT NULL,
    output_tokens BIGINT NOT NULL,
    cached_tokens BIGINT NOT NULL,
    ttft_ms DOUBLE PRECISION,
    duration_ms DOUBLE PRECISION NOT NULL,
    status INTEGER NOT NULL,
    partial BOOLEAN NOT NULL
"""

_INDEXES = (
    "CREATE INDEX usage_ledger_by_tenant ON usage_ledger (tenant_id, day)",
    "CREATE INDEX usage_ledger_by_key ON usage_ledger (key_id, day)",
    "CREATE INDEX usage_ledger_by_time ON usage_ledger (created_at)",
)

LEDGER_MIGRATIONS = (
    Migration(
        "ledger",
        1,
        "usage ledger: one row per request",
        (),
        postgresql=(f"CREATE TABLE usage_ledger (id BIGSERIAL PRIMARY KEY, {_COLUMNS})", *_INDEXES),
        sqlite=(
            f"CREATE TABLE usage_ledger (id INTEGER PRIMARY KEY AUTOINCREMENT, {_COLUMNS})",
            *_INDEXES,
        ),
    ),
    Migration(
        "ledger",
        2,
        "usage ledger: the client's own x-request-id beside the gateway's request id",
        ("ALTER TABLE usage_ledger ADD COLUMN correlation_id TEXT",),
    ),
    Migration(
        "ledger",
        3,
        "usage ledger: the operation (chat/completions, responses...) each row was served as",
        ("ALTER TABLE usage_ledger ADD COLUMN operation TEXT",),
    ),
    Migration("ledger", 4, "daily usage totals, kept with every batch", daily.CREATE),
    Migration(
        "ledger",
        5,
        "usage ledger: each row's cost in micro-units and the price version it used",
        (
            "ALTER TABLE usage_ledger ADD COLUMN cost_micros BIGINT",
            "ALTER TABLE usage_ledger ADD COLUMN price_version TEXT",
            # Rows before prices existed cost nothing known: 0 in the totals, NULL on the row.
            "ALTER TABLE usage_daily ADD COLUMN cost_micros BIGINT NOT NULL DEFAULT 0",
        ),
    ),
    Migration(
        "ledger",
        6,
        "usage ledger: the batch a row's request was a line of (issue 39)",
        ("ALTER TABLE usage_ledger ADD COLUMN batch_id TEXT",),
    ),
)

metadata = MetaData()

usage_ledger = Table(
    "usage_ledger",
    metadata,
    Column("id", BigInteger().with_variant(Integer, "sqlite"), primary_key=True),
    Column("request_id", Text, nullable=False),
    Column("created_at", Float, nullable=False),
    Column("day", Integer, nullable=False),
    Column("tenant_id", Text),
    Column("key_id", Text),
    Column("model", Text, nullable=False),
    Column("pool", Text),
    Column("variant", Text),
    Column("input_tokens", BigInteger, nullable=False),
    Column("output_tokens", BigInteger, nullable=False),
    Column("cached_tokens", BigInteger, nullable=False),
    Column("ttft_ms", Float),
    Column("duration_ms", Float, nullable=False),
    Column("status", Integer, nullable=False),
    Column("partial", Boolean, nullable=False),
    Column("correlation_id", Text),
    Column("operation", Text),
    Column("cost_micros", BigInteger),
    Column("price_version", Text),
    Column("batch_id", Text),
)


_ROW_FIELDS = tuple(f.name for f in fields(UsageRow))
_INSERTED = (*_ROW_FIELDS, "day")


def _placeholder(paramstyle: str, n: int) -> str:
    if paramstyle == "qmark":
        return "?"
    if paramstyle == "numeric_dollar":  # SQLAlchemy's asyncpg adapter
        return f"${n}"
    if paramstyle in ("format", "pyformat"):
        return "%s"
    raise ValueError(f"unsupported driver parameter style {paramstyle!r}")


def _insert_sql(paramstyle: str) -> str:
    """The ledger's INSERT in the driver's own parameter style. Every request pays for its row,
    and SQLAlchemy's per-row parameter processing for a Core ``executemany`` cost more than the
    insert itself (README, Performance): the rows go to the driver as plain tuples."""
    marks = ", ".join(_placeholder(paramstyle, n) for n in range(1, len(_INSERTED) + 1))
    # Column names and placeholders only, all constants of this module: no value is formatted in.
    return f"INSERT INTO usage_ledger ({', '.join(_INSERTED)}) VALUES ({marks})"  # noqa: S608


def _values(row: UsageRow) -> tuple[Any, ...]:
    """A row's column values, in ``_INSERTED`` order (the day last). Not
    ``dataclasses.asdict``, which deep-copies every field."""
    return (*[getattr(row, name) for name in _ROW_FIELDS], int(row.created_at // DAY))


async def write_rows(
    conn: AsyncConnection, backend: str, rows: Sequence[UsageRow], sql: str | None = None
) -> str:
    """Insert ``rows`` and add them to the daily totals, inside the caller's transaction (a
    batch line's row is written with the line's answer: one commits with the other). Returns
    the statement, which the caller may hand back next time."""
    sql = sql or _insert_sql(conn.dialect.paramstyle)
    await conn.exec_driver_sql(sql, [_values(r) for r in rows])
    await daily.add_totals(conn, backend, rows)
    return sql


class SqlLedgerStore:
    """Writes batches in one transaction (one multi-row statement), and answers usage reports."""

    def __init__(self, db: Database) -> None:
        self.db = db
        self._sql: str | None = None

    async def write(self, rows: Sequence[UsageRow]) -> None:
        async with self.db.transaction() as conn:
            self._sql = await write_rows(conn, self.db.backend, rows, self._sql)

    async def report(self, query: UsageQuery) -> Report:
        """Token totals grouped by ``query.group_by`` (some of day, tenant_id, key_id, model).

        The whole days of the range come from the daily totals, the partial days at its ends
        (at most one each) from the rows; the parts are added up here."""
        merged: dict[tuple[Any, ...], dict[str, Any]] = {}
        async with self.db.transaction() as conn:
            for part, whole_days in _parts(query):
                statement = _daily_report(part) if whole_days else _rows_report(part)
                for row in await conn.execute(statement.limit(MAX_REPORT_ROWS + 1)):
                    _add(merged, row._asdict(), query.group_by)
        rows = [_jsonable(merged[group]) for group in sorted(merged)]
        return Report(rows[:MAX_REPORT_ROWS], has_more=len(rows) > MAX_REPORT_ROWS)

    async def count(self) -> int:
        async with self.db.read() as conn:
            return int(
                (await conn.execute(select(func.count()).select_from(usage_ledger))).scalar_one()
            )


@value
class Report:
    rows: list[dict[str, Any]]
    has_more: bool = False
    """More groups matched than ``MAX_REPORT_ROWS``: narrow the range or the grouping."""


@value
class UsageQuery:
    group_by: tuple[str, ...]
    tenant_id: str | None = None
    key_id: str | None = None
    model: str | None = None
    start: float | None = None
    end: float | None = None


def _parts(query: UsageQuery) -> list[tuple[UsageQuery, bool]]:
    """``query`` split into (part, whole days?): a partial first day, whole days, a partial
    last day; a range inside one or two partial days is read from the rows alone."""
    start, end = query.start, query.end
    first = None if start is None else math.ceil(start / DAY) * DAY
    last = None if end is None else math.floor(end / DAY) * DAY
    if first is not None and last is not None and first >= last:
        return [(query, daily.whole_days(start, end))]
    parts = [(replace(query, start=first, end=last), True)]
    if start is not None and start != first:
        parts.append((replace(query, start=start, end=first), False))
    if end is not None and end != last:
        parts.append((replace(query, start=last, end=end), False))
    return parts


def _add(merged: dict[tuple[Any, ...], dict[str, Any]], row: dict[str, Any], groups: Any) -> None:
    """Add one part's group into ``merged`` (anonymous tenant and key as '' in both sources)."""
    row = {str(k): v for k, v in row.items()}
    for name in ("tenant_id", "key_id"):
        if name in row and row[name] is None:
            row[name] = ""
    group = tuple(row[g] for g in groups)
    found = merged.get(group)
    if found is None:
        merged[group] = row
    else:
        for name in daily.TOTALS:
            found[name] = (found[name] or 0) + (row[name] or 0)


def _rows_report(query: UsageQuery) -> Select[*tuple[Any, ...]]:
    t = usage_ledger.c
    groups = [t[name] for name in query.group_by]
    statement = select(
        *groups,
        func.count().label("requests"),
        *(func.sum(t[name]).label(name) for name in daily.TOTALS[1:]),
    )
    statement = _filtered(statement, t, query).group_by(*groups).order_by(*groups)
    if query.start is not None:
        statement = statement.where(t.created_at >= query.start)
    if query.end is not None:
        statement = statement.where(t.created_at < query.end)
    return statement


def _daily_report(query: UsageQuery) -> Select[*tuple[Any, ...]]:
    t = daily.usage_daily.c
    groups = [t[name] for name in query.group_by]
    statement = select(*groups, *(func.sum(t[name]).label(name) for name in daily.TOTALS))
    statement = _filtered(statement, t, query)
    return statement.group_by(*groups).order_by(*groups)


def _filtered(
    statement: Select[*tuple[Any, ...]], t: Any, query: UsageQuery
) -> Select[*tuple[Any, ...]]:
    """Equality filters, and the range in whole days (the day is the second column of every
    index, so the scan stays inside the range); exact times are the caller's to add."""
    for name in ("tenant_id", "key_id", "model"):
        value = getattr(query, name)
        if value is not None:
            statement = statement.where(t[name] == value)
    if query.start is not None:
        statement = statement.where(t.day >= int(query.start // DAY))
    if query.end is not None:
        # The day of ``end`` itself only when ``end`` falls inside it.
        last = query.end / DAY
        statement = statement.where(t.day < (int(last) if last == int(last) else int(last) + 1))
    return statement


def _jsonable(row: dict[str, Any]) -> dict[str, Any]:
    """Sums come back as Decimal on PostgreSQL; the API speaks integers. Column names are
    SQLAlchemy's ``quoted_name`` (a str subclass, which orjson refuses as a key)."""
    out = {str(k): int(v or 0) if k in daily.TOTALS else v for k, v in row.items()}
    for name in ("tenant_id", "key_id"):  # anonymous rows: '' in the daily totals
        if out.get(name) == "":
            out[name] = None
    if "day" in out:
        out["date"] = _date(out.pop("day"))
    return out


def _date(day: int) -> str:
    return (datetime.date(1970, 1, 1) + datetime.timedelta(days=int(day))).isoformat()
