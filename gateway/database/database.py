"""The store every stateful component shares: one engine, its backend, migrations.

db = Database.open(config.storage)
await db.migrate(all_migrations())
async with db.transaction() as conn:
    await conn.execute(insert(usage).values(rows))  # SQLAlchemy Core, either backend
await db.close()
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterable, Mapping
from contextlib import asynccontextmanager

from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from gateway.database import migrations
from gateway.database.config import StorageConfig
from gateway.database.engine import READ_ONLY, create_engine


class Database:
    def __init__(self, engine: AsyncEngine, config: StorageConfig) -> None:
        self.engine = engine
        self.config = config
        self.backend = config.backend

    @classmethod
    def open(cls, config: StorageConfig) -> Database:
        """Create the engine; connections open lazily, on first use."""
        return cls(create_engine(config), config)

    @asynccontextmanager
    async def transaction(self) -> AsyncIterator[AsyncConnection]:
        """A connection inside a transaction, committed when the block ends without error."""
        async with self.engine.begin() as conn:
            yield conn

    @asynccontextmanager
    async def read(self) -> AsyncIterator[AsyncConnection]:
        """A connection inside a transaction that only reads: on SQLite a deferred ``BEGIN``,
        which takes no write lock (``transaction`` begins IMMEDIATE to queue writers)."""
        async with self.engine.connect() as conn:
            await conn.execution_options(**{READ_ONLY: True})
            async with conn.begin():
                yield conn

    async def migrate(
        self,
        all_migrations: Iterable[migrations.Migration],
        targets: Mapping[str, int] | None = None,
    ) -> list[migrations.Migration]:
        """Bring each component's schema up to date (or to ``targets``); what was applied."""
        async with self.transaction() as conn:
            return await migrations.migrate(conn, self.backend, all_migrations, targets)

    async def schema_versions(self) -> dict[str, int]:
        async with self.transaction() as conn:
            return await migrations.applied_versions(conn)

    async def close(self) -> None:
        await self.engine.dispose()

    def __repr__(self) -> str:
        return f"Database({self.config.display_url()})"
