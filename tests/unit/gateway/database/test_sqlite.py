"""What the embedded backend sets up: a file (its folder created), WAL, foreign keys."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError
from sqlalchemy import text

from gateway.database import Database, StorageConfig


async def test_sqlite_store_is_a_wal_file_in_a_created_folder(tmp_path: Path) -> None:
    path = tmp_path / "nested" / "dir" / "gw.db"
    db = Database.open(StorageConfig(url=f"sqlite:///{path}"))
    try:
        async with db.transaction() as conn:
            mode = (await conn.execute(text("PRAGMA journal_mode"))).scalar_one()
            fks = (await conn.execute(text("PRAGMA foreign_keys"))).scalar_one()
    finally:
        await db.close()
    assert (mode, fks) == ("wal", 1)
    assert path.exists()


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("sqlite://", "needs a file path"),
        ("sqlite:///:memory:", "needs a file path"),
        ("mysql://u@h/db", "unsupported database 'mysql'"),
        ("not a url", "not a database URL"),
    ],
)
def test_unusable_urls_are_config_errors(url: str, message: str) -> None:
    with pytest.raises(ValidationError, match=message):
        StorageConfig(url=url)


def test_the_password_never_shows() -> None:
    config = StorageConfig(url="postgresql://gw:hunter2secret@db.internal:5432/gw")
    assert "hunter2secret" not in config.display_url()
    assert "hunter2secret" not in repr(config)
    assert "hunter2secret" not in repr(Database.open(config))
    assert config.backend == "postgresql"


async def test_database_and_wal_files_are_private_whatever_the_umask(tmp_path: Path) -> None:
    import os

    path = tmp_path / "gw.db"
    old = os.umask(0o000)
    try:
        db = Database.open(StorageConfig(url=f"sqlite:///{path}"))
        try:
            async with db.transaction() as conn:
                await conn.execute(text("CREATE TABLE t (x INTEGER)"))
        finally:
            await db.close()
    finally:
        os.umask(old)
    for name in ("gw.db", "gw.db-wal", "gw.db-shm"):
        if (tmp_path / name).exists():
            assert (tmp_path / name).stat().st_mode & 0o777 == 0o600, name


async def test_reads_take_no_write_lock(tmp_path: Path) -> None:
    """A read goes on while a writer holds its transaction open; with ``BEGIN IMMEDIATE`` it
    would wait for the writer (the busy timeout is 30 s)."""
    import asyncio

    db = Database.open(StorageConfig(url=f"sqlite:///{tmp_path}/gw.db"))
    try:
        async with db.transaction() as conn:
            await conn.execute(text("CREATE TABLE t (x INTEGER)"))
        async with db.transaction() as writer:
            await writer.execute(text("INSERT INTO t VALUES (1)"))

            async def read() -> int:
                async with db.read() as conn:
                    return int((await conn.execute(text("SELECT COUNT(*) FROM t"))).scalar_one())

            assert await asyncio.wait_for(read(), 5) == 0  # the writer has not committed
    finally:
        await db.close()


def test_postgres_pool_sizes_come_from_the_config() -> None:
    from gateway.database.engine import create_engine

    config = StorageConfig(
        url="postgresql://gw@db.internal/gw", pool_size=7, max_overflow=3, pool_timeout=2.5
    )
    pool = create_engine(config).sync_engine.pool
    assert (pool.size(), pool._max_overflow, pool._timeout) == (7, 3, 2.5)  # type: ignore[attr-defined]
