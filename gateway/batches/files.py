"""Batch files in the shared store (SQLite or PostgreSQL), every read scoped to a tenant::

    store = FileStore(database)
    await store.put(record, content)                       # one transaction: all or nothing
    await store.get("file-ab12", tenant_id="acme", now=t)  # None: absent, expired, another's
    await store.content("file-ab12", tenant_id="acme", now=t)
    await store.page(tenant_id="acme", now=t, limit=20, after=None, order="desc", purpose=None)
    await store.delete("file-ab12", tenant_id="acme")
    await store.expire(now=t)

A file another tenant owns reads exactly like a file that does not exist.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import delete, func, select, tuple_
from sqlalchemy.ext.asyncio import AsyncConnection

from gateway.batches.schema import batch_files
from gateway.database.database import Database
from gateway.values import value

EXPIRE_BATCH = 500


@value
class FileRecord:
    id: str
    tenant_id: str
    purpose: str
    filename: str
    bytes: int
    lines: int
    created_at: float
    expires_at: float

    def to_json(self) -> dict[str, Any]:
        """OpenAI's ``file`` object."""
        return {
            "id": self.id,
            "object": "file",
            "bytes": self.bytes,
            "created_at": int(self.created_at),
            "expires_at": int(self.expires_at),
            "filename": self.filename,
            "purpose": self.purpose,
            "status": "processed",
        }


_META = [c for c in batch_files.c if c.name != "content"]


def _record(row: Any) -> FileRecord:
    return FileRecord(**{c.name: row[c.name] for c in _META})


async def insert_file(conn: AsyncConnection, record: FileRecord, content: bytes) -> None:
    """Inside the caller's transaction (a batch's output is written with its final state)."""
    values = {c.name: getattr(record, c.name) for c in _META}
    await conn.execute(batch_files.insert().values(**values, content=content.decode()))


class FileStore:
    def __init__(self, db: Database) -> None:
        self.db = db

    async def put(self, record: FileRecord, content: bytes) -> None:
        async with self.db.transaction() as conn:
            await insert_file(conn, record, content)

    async def get(self, file_id: str, *, tenant_id: str, now: float) -> FileRecord | None:
        t = batch_files.c
        query = select(*_META).where(t.id == file_id, t.tenant_id == tenant_id, t.expires_at > now)
        async with self.db.read() as conn:
            row = (await conn.execute(query)).mappings().first()
        return None if row is None else _record(row)

    async def content(self, file_id: str, *, tenant_id: str, now: float) -> bytes | None:
        t = batch_files.c
        query = select(t.content).where(
            t.id == file_id, t.tenant_id == tenant_id, t.expires_at > now
        )
        async with self.db.read() as conn:
            text = (await conn.execute(query)).scalar_one_or_none()
        return None if text is None else str(text).encode()

    async def page(
        self,
        *,
        tenant_id: str,
        now: float,
        limit: int,
        after: str | None,
        order: str,
        purpose: str | None,
    ) -> tuple[list[FileRecord], bool]:
        """Up to ``limit`` files after the file ``after`` (in ``order`` of creation) and whether
        more follow."""
        t = batch_files.c
        query = select(*_META).where(t.tenant_id == tenant_id, t.expires_at > now)
        if purpose is not None:
            query = query.where(t.purpose == purpose)
        async with self.db.read() as conn:
            if after is not None:
                cursor = (
                    await conn.execute(
                        select(t.created_at).where(t.id == after, t.tenant_id == tenant_id)
                    )
                ).scalar_one_or_none()
                if cursor is not None:
                    query = query.where(
                        tuple_(t.created_at, t.id) < tuple_(cursor, after)
                        if order == "desc"
                        else tuple_(t.created_at, t.id) > tuple_(cursor, after)
                    )
            ordering = (
                (t.created_at.desc(), t.id.desc())
                if order == "desc"
                else (t.created_at.asc(), t.id.asc())
            )
            rows = (await conn.execute(query.order_by(*ordering).limit(limit + 1))).mappings()
            records = [_record(r) for r in rows]
        return records[:limit], len(records) > limit

    async def delete(self, file_id: str, *, tenant_id: str) -> bool:
        t = batch_files.c
        statement = delete(batch_files).where(t.id == file_id, t.tenant_id == tenant_id)
        async with self.db.transaction() as conn:
            return bool((await conn.execute(statement)).rowcount)

    async def count(self, tenant_id: str, now: float) -> int:
        t = batch_files.c
        query = select(func.count()).where(t.tenant_id == tenant_id, t.expires_at > now)
        async with self.db.read() as conn:
            return int((await conn.execute(query)).scalar_one())

    async def expire(self, *, now: float) -> int:
        t = batch_files.c
        removed = 0
        while True:
            ids = select(t.id).where(t.expires_at <= now).limit(EXPIRE_BATCH)
            statement = delete(batch_files).where(t.id.in_(ids.scalar_subquery()))
            async with self.db.transaction() as conn:
                count = int((await conn.execute(statement)).rowcount)
            removed += count
            if count < EXPIRE_BATCH:
                return removed
