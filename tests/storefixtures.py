"""Pytest fixtures that run a test once on SQLite and once on a real PostgreSQL server.

Import them into a conftest (``from tests.storefixtures import *``-style, by name). The
PostgreSQL server is started once per session and every test gets a database of its own.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from gateway.database import Database, StorageConfig
from gateway.runtime.migrations import all_migrations
from tests.pgserver import PostgresServer, start_postgres


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[PostgresServer]:
    with start_postgres() as server:
        yield server


def sqlite_config(tmp_path: Path) -> StorageConfig:
    return StorageConfig(url=f"sqlite:///{tmp_path}/store.db")


def postgres_config(server: PostgresServer) -> StorageConfig:
    return StorageConfig(url=server.create_database(f"test_{uuid.uuid4().hex[:16]}"))


@pytest.fixture(params=["sqlite", "postgresql"])
def storage_config(request: pytest.FixtureRequest, tmp_path: Path) -> StorageConfig:
    if request.param == "sqlite":
        return sqlite_config(tmp_path)
    return postgres_config(request.getfixturevalue("postgres_server"))


@pytest.fixture
async def database(storage_config: StorageConfig) -> AsyncIterator[Database]:
    """An empty store (no schema yet)."""
    db = Database.open(storage_config)
    try:
        yield db
    finally:
        await db.close()


@pytest.fixture
async def migrated(database: Database) -> Database:
    """A store with every component's schema at its latest version."""
    await database.migrate(all_migrations())
    return database
