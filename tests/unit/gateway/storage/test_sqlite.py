"""What the embedded backend sets up: a file (its folder created), WAL, foreign keys."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError
from sqlalchemy import text

from gateway.storage import Database, StorageConfig


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
