"""The usage ledger in the shared store (SQLite or PostgreSQL): its migrations, table and queries.

``day`` (UTC day number) is stored with each row so both backends group by day alike, and the
usage reports group in SQL rather than reading rows back.
"""

from __future__ import annotations

import datetime
from collections.abc import Sequence
from dataclasses import dataclass, fields
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

from gateway.accounting.ledger import UsageRow
from gateway.storage.database import Database
from gateway.storage.migrations import Migration

DAY = 86400

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
)


_ROW_FIELDS = tuple(f.name for f in fields(UsageRow))


def _values(row: UsageRow) -> dict[str, Any]:
    """A row's column values. Not ``dataclasses.asdict``, which deep-copies every field: 19
    against 1.5 us a row (README, Performance), paid for every request."""
    values = {name: getattr(row, name) for name in _ROW_FIELDS}
    values["day"] = int(row.created_at // DAY)
    return values


class SqlLedgerStore:
    """Writes batches in one transaction (one multi-row statement), and answers usage reports."""

    def __init__(self, db: Database) -> None:
        self.db = db

    async def write(self, rows: Sequence[UsageRow]) -> None:
        values = [_values(r) for r in rows]
        async with self.db.transaction() as conn:
            await conn.execute(insert(usage_ledger), values)

    async def report(self, query: UsageQuery) -> list[dict[str, Any]]:
        """Token totals grouped by ``query.group_by`` (some of day, tenant_id, key_id, model)."""
        t = usage_ledger.c
        groups = [t[name] for name in query.group_by]
        statement = (
            select(
                *groups,
                func.count().label("requests"),
                func.sum(t.input_tokens).label("input_tokens"),
                func.sum(t.output_tokens).label("output_tokens"),
                func.sum(t.cached_tokens).label("cached_tokens"),
            )
            .group_by(*groups)
            .order_by(*groups)
        )
        for name in ("tenant_id", "key_id", "model"):
            value = getattr(query, name)
            if value is not None:
                statement = statement.where(t[name] == value)
        if query.start is not None:
            statement = statement.where(t.created_at >= query.start)
        if query.end is not None:
            statement = statement.where(t.created_at < query.end)
        async with self.db.read() as conn:
            result = await conn.execute(statement)
            return [_jsonable(row._asdict()) for row in result]

    async def count(self) -> int:
        async with self.db.read() as conn:
            return int(
                (await conn.execute(select(func.count()).select_from(usage_ledger))).scalar_one()
            )


@dataclass(frozen=True, slots=True)
class UsageQuery:
    group_by: tuple[str, ...]
    tenant_id: str | None = None
    key_id: str | None = None
    model: str | None = None
    start: float | None = None
    end: float | None = None


def _jsonable(row: dict[str, Any]) -> dict[str, Any]:
    """Sums come back as Decimal on PostgreSQL; the API speaks integers. Column names are
    SQLAlchemy's ``quoted_name`` (a str subclass, which orjson refuses as a key)."""
    out = {
        str(k): int(v) if k.endswith("_tokens") or k == "requests" else v for k, v in row.items()
    }
    if "day" in out:
        out["date"] = _date(out.pop("day"))
    return out


def _date(day: int) -> str:
    return (datetime.date(1970, 1, 1) + datetime.timedelta(days=int(day))).isoformat()
