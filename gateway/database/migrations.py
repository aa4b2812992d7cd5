"""Schema migrations: numbered, per component, applied in order inside one locked transaction.

Each component that keeps rows in the store (``auth`` for tenants and keys, ``ledger`` for usage)
owns a tuple of :class:`Migration` with versions 1, 2, 3, ... and appends a new version to change
its schema; it never edits an applied one. ``schema_migrations`` records what each database has::

    LEDGER_MIGRATIONS = (
        Migration("ledger", 1, "usage rows", ("CREATE TABLE usage_ledger (...)",)),
    )

and the tuple is listed once in :func:`gateway.runtime.migrations.all_migrations`.

The SQL is written once for both backends where it can be (TEXT, INTEGER, BIGINT, BOOLEAN,
DOUBLE PRECISION mean the same to both); ``postgresql=``/``sqlite=`` replace the statements on that
backend where they cannot (auto-increment keys, partial indexes, ...).
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncConnection

from gateway.values import value

# pg_advisory_xact_lock key ("pdgw"): replicas starting together migrate one after another.
_POSTGRES_LOCK_KEY = 0x70646777

_CREATE_VERSIONS = """
CREATE TABLE IF NOT EXISTS schema_migrations (
    component TEXT NOT NULL,
    version INTEGER NOT NULL,
    description TEXT NOT NULL,
    applied_at DOUBLE PRECISION NOT NULL,
    PRIMARY KEY (component, version)
)
"""


class MigrationError(Exception):
    """The migrations or the database's recorded schema do not fit together."""


@value
class Migration:
    component: str
    version: int
    description: str
    statements: tuple[str, ...]
    postgresql: tuple[str, ...] | None = None
    sqlite: tuple[str, ...] | None = None

    def statements_for(self, backend: str) -> tuple[str, ...]:
        special = self.postgresql if backend == "postgresql" else self.sqlite
        return self.statements if special is None else special


def check_sequences(migrations: Iterable[Migration]) -> dict[str, list[Migration]]:
    """Group by component, each numbered 1..n without gaps or repeats."""
    by_component: dict[str, list[Migration]] = {}
    for m in migrations:
        by_component.setdefault(m.component, []).append(m)
    for component, items in by_component.items():
        items.sort(key=lambda m: m.version)
        versions = [m.version for m in items]
        if versions != list(range(1, len(items) + 1)):
            raise MigrationError(f"{component}: versions must be 1..n, got {versions}")
    return by_component


async def applied_versions(conn: AsyncConnection) -> dict[str, int]:
    """The highest applied version of each component (none yet: an empty dict)."""
    await conn.execute(text(_CREATE_VERSIONS))
    rows = await conn.execute(
        text("SELECT component, MAX(version) FROM schema_migrations GROUP BY component")
    )
    return {str(component): int(version) for component, version in rows}


async def migrate(
    conn: AsyncConnection,
    backend: str,
    migrations: Iterable[Migration],
    targets: Mapping[str, int] | None = None,
) -> list[Migration]:
    """Apply what is pending (up to ``targets[component]`` when given); what was applied.

    ``conn`` must be inside a transaction: on PostgreSQL an advisory lock held to its end keeps
    concurrent starters apart; SQLite's ``BEGIN IMMEDIATE`` already does.
    """
    by_component = check_sequences(migrations)
    if backend == "postgresql":
        await conn.execute(text(f"SELECT pg_advisory_xact_lock({_POSTGRES_LOCK_KEY})"))
    current = await applied_versions(conn)
    applied: list[Migration] = []
    for component, items in sorted(by_component.items()):
        have = current.get(component, 0)
        if have > len(items):
            raise MigrationError(
                f"the database's {component} schema is at version {have}, newer than this "
                f"gateway knows ({len(items)}): upgrade the gateway"
            )
        target = (targets or {}).get(component, len(items))
        for m in items[have:target]:
            for statement in m.statements_for(backend):
                await conn.execute(text(statement))
            await conn.execute(
                text(
                    "INSERT INTO schema_migrations (component, version, description, applied_at)"
                    " VALUES (:c, :v, :d, :t)"
                ),
                {"c": m.component, "v": m.version, "d": m.description, "t": time.time()},
            )
            applied.append(m)
    return applied
