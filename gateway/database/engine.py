"""Open an async SQLAlchemy engine for the configured store, with each backend set up properly.

SQLite: WAL (readers never block the writer), a busy timeout, foreign keys on, and transactions
that begin with ``BEGIN IMMEDIATE`` so that DDL is transactional and two writers queue on the
busy timeout instead of failing with SQLITE_BUSY when a read lock cannot be upgraded. Reads
(``Database.read``) begin with a plain ``BEGIN``: they take no write lock, so key lookups never
queue behind the ledger's writes. The file is created 0600: it holds key hashes and usage.
PostgreSQL: asyncpg, a configured pool, pre-ping so a restarted server costs no failed request.
"""

from __future__ import annotations

import os
import sqlite3
import time
from pathlib import Path
from typing import Any

from sqlalchemy import event
from sqlalchemy.engine import URL, make_url
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine

from gateway.database.config import StorageConfig
from gateway.extras import require

SQLITE_BUSY_TIMEOUT_MS = 30_000
READ_ONLY = "pd_gateway_read_only"
"""Execution option marking a connection whose transaction only reads (see ``Database.read``)."""


def async_url(config: StorageConfig) -> URL:
    """The configured URL with the async driver each backend uses."""
    url = make_url(config.url)
    driver = "sqlite+aiosqlite" if config.backend == "sqlite" else "postgresql+asyncpg"
    return url.set(drivername=driver)


def create_engine(config: StorageConfig) -> AsyncEngine:
    if config.backend == "postgresql":
        require("postgres", "storage.url: postgresql")
    """An engine; no connection is made until first use."""
    url = async_url(config)
    if config.backend == "sqlite":
        return _sqlite_engine(url, config)
    return create_async_engine(
        url,
        pool_size=config.pool_size,
        max_overflow=config.pool_size if config.max_overflow is None else config.max_overflow,
        pool_timeout=config.pool_timeout,
        pool_recycle=config.pool_recycle,
        pool_pre_ping=True,
        connect_args={"timeout": config.connect_timeout},
    )


def _sqlite_engine(url: URL, config: StorageConfig) -> AsyncEngine:
    assert url.database is not None
    create_private_file(Path(url.database))
    engine = create_async_engine(url, connect_args={"timeout": config.connect_timeout})

    @event.listens_for(engine.sync_engine, "connect")
    def _on_connect(dbapi_connection: Any, _record: Any) -> None:
        # Take transaction control from the driver: it would otherwise begin lazily and commit
        # before DDL, which makes migrations non-atomic.
        dbapi_connection.isolation_level = None
        cursor = dbapi_connection.cursor()
        # busy_timeout first: switching to WAL needs a lock that another opener may hold.
        cursor.execute(f"PRAGMA busy_timeout={SQLITE_BUSY_TIMEOUT_MS}")
        _switch_to_wal(cursor)
        for pragma in ("synchronous=NORMAL", "foreign_keys=ON"):
            cursor.execute("PRAGMA " + pragma)
        cursor.close()

    @event.listens_for(engine.sync_engine, "begin")
    def _on_begin(connection: Any) -> None:
        read_only = connection.get_execution_options().get(READ_ONLY, False)
        connection.exec_driver_sql("BEGIN" if read_only else "BEGIN IMMEDIATE")

    return engine


def create_private_file(path: Path) -> None:
    """Create ``path`` empty and 0600 unless it exists, whatever the umask; SQLite gives its
    -wal and -shm files the database file's mode."""
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        return
    os.fchmod(fd, 0o600)  # O_CREAT's mode is masked by the umask; never wider than 0600 anyway
    os.close(fd)


def _switch_to_wal(cursor: Any, attempts: int = 50) -> None:
    """``PRAGMA journal_mode=WAL``, retried: when several replicas open a new file at once, the
    switch can fail with "database is locked" at once, without waiting on the busy timeout."""
    for attempt in range(attempts):
        try:
            cursor.execute("PRAGMA journal_mode=WAL")
            return
        except sqlite3.OperationalError as err:
            if "locked" not in str(err) or attempt == attempts - 1:
                raise
            time.sleep(0.02 * (attempt + 1))  # runs on aiosqlite's worker thread, not the loop
