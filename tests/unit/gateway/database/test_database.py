"""The store's contract, run against SQLite and a real PostgreSQL alike."""

from __future__ import annotations

import asyncio

import pytest
from sqlalchemy import text

from gateway.auth.schema import AUTH_MIGRATIONS
from gateway.database import Database, Migration, MigrationError, StorageConfig
from gateway.database.migrations import check_sequences
from gateway.runtime.migrations import all_migrations

LATEST_AUTH = len(AUTH_MIGRATIONS)


def latest_versions() -> dict[str, int]:
    """Every registered component (auth, the ledger, ...) at its newest version."""
    latest: dict[str, int] = {}
    for m in all_migrations():
        latest[m.component] = max(latest.get(m.component, 0), m.version)
    return latest


# A component of the kind the usage ledger is: its own table, an auto-increment key that needs
# different SQL on each backend, and a batch insert.
PROBE = (
    Migration(
        "probe",
        1,
        "rows with an auto-increment id",
        ("CREATE TABLE probe_rows (id INTEGER PRIMARY KEY, label TEXT NOT NULL)",),
        postgresql=("CREATE TABLE probe_rows (id BIGSERIAL PRIMARY KEY, label TEXT NOT NULL)",),
    ),
    Migration("probe", 2, "a second column", ("ALTER TABLE probe_rows ADD COLUMN n INTEGER",)),
)


async def test_fresh_store_migrates_to_latest_once(database: Database) -> None:
    applied = await database.migrate(all_migrations())
    assert [(m.component, m.version) for m in applied] == sorted(
        (m.component, m.version) for m in all_migrations()
    )
    assert await database.schema_versions() == latest_versions()
    assert await database.migrate(all_migrations()) == []


async def test_first_schema_version_upgrades_in_place_with_rows_intact(database: Database) -> None:
    await database.migrate(all_migrations(), targets={"auth": 1})
    assert (await database.schema_versions())["auth"] == 1
    async with database.transaction() as conn:
        await conn.execute(
            text(
                "INSERT INTO tenants (id, name, allowed_models, limits, labels, enabled,"
                " created_at, updated_at) VALUES ('acme', 'Acme', '[\"m1\"]', '{}',"
                ' \'{"team": "x"}\', TRUE, 1.0, 1.0)'
            )
        )
        await conn.execute(
            text(
                "INSERT INTO api_keys (id, tenant_id, name, secret_hash, limits, created_at)"
                " VALUES ('k1', 'acme', 'ci', 'abc123', '{}', 2.0)"
            )
        )

    applied = await database.migrate(all_migrations())

    assert [(m.component, m.version) for m in applied] == [
        ("auth", v) for v in range(2, LATEST_AUTH + 1)
    ]
    async with database.transaction() as conn:
        tenant = (await conn.execute(text("SELECT id, name, allowed_models FROM tenants"))).one()
        key = (
            await conn.execute(
                text("SELECT id, tenant_id, secret_hash, previous_secret_hash FROM api_keys")
            )
        ).one()
        await conn.execute(text("UPDATE api_keys SET previous_secret_hash = 'old' WHERE id = 'k1'"))
    assert tuple(tenant) == ("acme", "Acme", '["m1"]')
    assert tuple(key) == ("k1", "acme", "abc123", None)


async def test_another_component_adds_its_own_tables_and_batch_inserts(database: Database) -> None:
    await database.migrate((*all_migrations(), *PROBE))
    async with database.transaction() as conn:
        await conn.execute(
            text("INSERT INTO probe_rows (label, n) VALUES (:label, :n)"),
            [{"label": f"row{i}", "n": i} for i in range(100)],
        )
    async with database.transaction() as conn:
        ids = (await conn.execute(text("SELECT id FROM probe_rows ORDER BY id"))).scalars().all()
    assert ids == list(range(1, 101))
    assert await database.schema_versions() == {**latest_versions(), "probe": 2}


async def test_a_database_newer_than_the_code_is_refused(database: Database) -> None:
    await database.migrate((*all_migrations(), *PROBE))
    with pytest.raises(MigrationError, match="probe schema is at version 2, newer"):
        await database.migrate((*all_migrations(), PROBE[0]))


async def test_a_failed_migration_leaves_nothing_behind(database: Database) -> None:
    statements = ("CREATE TABLE t1 (x INTEGER)", "NOPE")
    broken = Migration("probe", 1, "second statement fails", statements)
    with pytest.raises(Exception, match=r"(?i)syntax"):
        await database.migrate((*all_migrations(), broken))
    assert await database.schema_versions() == {}
    async with database.transaction() as conn:
        with pytest.raises(Exception, match="tenants"):
            await conn.execute(text("SELECT * FROM tenants"))


async def test_replicas_starting_together_migrate_once(storage_config: StorageConfig) -> None:
    replicas = [Database.open(storage_config) for _ in range(3)]
    try:
        results = await asyncio.gather(*(db.migrate(all_migrations()) for db in replicas))
    finally:
        for db in replicas:
            await db.close()
    assert sorted(len(r) for r in results) == [0, 0, len(all_migrations())]


async def test_a_transaction_that_raises_is_rolled_back(migrated: Database) -> None:
    with pytest.raises(RuntimeError):
        async with migrated.transaction() as conn:
            await conn.execute(
                text(
                    "INSERT INTO admin_keys (id, name, secret_hash, created_at)"
                    " VALUES ('a', 'n', 'h', 1.0)"
                )
            )
            raise RuntimeError("abort")
    async with migrated.transaction() as conn:
        count = (await conn.execute(text("SELECT COUNT(*) FROM admin_keys"))).scalar_one()
    assert count == 0


def test_versions_must_be_numbered_without_gaps() -> None:
    with pytest.raises(MigrationError, match=r"versions must be 1..n, got \[1, 3\]"):
        check_sequences((PROBE[0], Migration("probe", 3, "gap", ("SELECT 1",))))
