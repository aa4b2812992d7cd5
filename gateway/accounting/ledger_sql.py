"""The usage ledger in the shared store (SQLite or PostgreSQL): its migrations, table and queries.

``day`` (UTC day number) is stored with each row so both backends group by day alike, and the
usage reports group in SQL rather than reading rows back. Reports over whole days read the daily
totals (``daily.py``), others the rows, bounded by day so the (tenant|key, day) indexes narrow
the scan; either way at most ``MAX_REPORT_ROWS`` groups come back.
"""

from __future__ import annotations

import datetime
from collections.abc import Sequence
from dataclasses import asdict, dataclass
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
    insert,
    select,
)
from sqlalchemy.sql import Select

from gateway.accounting import daily
from gateway.accounting.ledger import UsageRow
from gateway.storage.database import Database
from gateway.storage.migrations import Migration

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
    Migration("ledger", 3, "daily usage totals, kept with every batch", daily.CREATE),
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
)


class SqlLedgerStore:
    """Writes batches in one transaction (one multi-row statement), and answers usage reports."""

    def __init__(self, db: Database) -> None:
        self.db = db

    async def write(self, rows: Sequence[UsageRow]) -> None:
        values = [{**asdict(r), "day": int(r.created_at // DAY)} for r in rows]
        async with self.db.transaction() as conn:
            await conn.execute(insert(usage_ledger), values)
            await daily.add_totals(conn, self.db.backend, rows)

    async def report(self, query: UsageQuery) -> Report:
        """Token totals grouped by ``query.group_by`` (some of day, tenant_id, key_id, model)."""
        whole_days = daily.whole_days(query.start, query.end)
        statement = _daily_report(query) if whole_days else _rows_report(query)
        async with self.db.transaction() as conn:
            result = await conn.execute(statement.limit(MAX_REPORT_ROWS + 1))
            rows = [_jsonable(row._asdict()) for row in result]
        return Report(rows[:MAX_REPORT_ROWS], has_more=len(rows) > MAX_REPORT_ROWS)

    async def count(self) -> int:
        async with self.db.transaction() as conn:
            return int(
                (await conn.execute(select(func.count()).select_from(usage_ledger))).scalar_one()
            )


@dataclass(frozen=True, slots=True)
class Report:
    rows: list[dict[str, Any]]
    has_more: bool = False
    """More groups matched than ``MAX_REPORT_ROWS``: narrow the range or the grouping."""


@dataclass(frozen=True, slots=True)
class UsageQuery:
    group_by: tuple[str, ...]
    tenant_id: str | None = None
    key_id: str | None = None
    model: str | None = None
    start: float | None = None
    end: float | None = None


def _rows_report(query: UsageQuery) -> Select[*tuple[Any, ...]]:
    t = usage_ledger.c
    groups = [t[name] for name in query.group_by]
    statement = select(
        *groups,
        func.count().label("requests"),
        *(func.sum(t[name]).label(name) for name in daily.TOTALS[1:]),
    )
    # Anonymous (NULL) groups first on both backends, where the daily totals' '' sorts.
    ordered = (g.nulls_first() for g in groups)
    statement = _filtered(statement, t, query).group_by(*groups).order_by(*ordered)
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
    out = {
        str(k): int(v or 0) if k.endswith("_tokens") or k == "requests" else v
        for k, v in row.items()
    }
    for name in ("tenant_id", "key_id"):  # anonymous rows: '' in the daily totals
        if out.get(name) == "":
            out[name] = None
    if "day" in out:
        out["date"] = _date(out.pop("day"))
    return out


def _date(day: int) -> str:
    return (datetime.date(1970, 1, 1) + datetime.timedelta(days=int(day))).isoformat()
