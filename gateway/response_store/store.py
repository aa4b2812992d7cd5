"""Stored responses in the shared store (SQLite or PostgreSQL), every read scoped to a tenant::

    store = SqlResponseStore(database)
    await store.put(record)                              # once, when the response finished
    await store.get("resp_ab12", tenant_id="acme", now=clock())   # None: absent, expired or
                                                                  # another tenant's
    await store.delete("resp_ab12", tenant_id="acme")    # True when it was there
    await store.purge_tenant("acme")                     # rows removed
    await store.expire(now=clock())                      # rows removed

A row another tenant owns reads exactly like a row that does not exist.
"""

from __future__ import annotations

from typing import Any

import orjson
from sqlalchemy import delete, func, select
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert

from gateway.database.database import Database
from gateway.response_store.schema import stored_responses
from gateway.values import value

Json = dict[str, Any]
EXPIRE_BATCH = 1000
"""Rows one sweep statement deletes: a long backlog is removed in short transactions."""


@value
class StoredResponse:
    id: str
    tenant_id: str
    key_id: str | None
    created_at: float
    expires_at: float
    status: str
    previous_response_id: str | None
    response: bytes
    """The response object, JSON, as the client was sent it (status as it ended)."""
    input_items: bytes
    """The conversation it was made from, JSON: a list of items, each with its ``id``."""

    @property
    def size_bytes(self) -> int:
        return len(self.response) + len(self.input_items)

    def response_json(self) -> Json:
        loaded: Json = orjson.loads(self.response)
        return loaded

    def items_json(self) -> list[Json]:
        loaded: list[Json] = orjson.loads(self.input_items)
        return loaded


class SqlResponseStore:
    def __init__(self, db: Database) -> None:
        self.db = db

    async def put(self, record: StoredResponse) -> None:
        """Insert; a second write of the same id (a retried write) changes nothing."""
        values = {
            "id": record.id,
            "tenant_id": record.tenant_id,
            "key_id": record.key_id,
            "created_at": record.created_at,
            "expires_at": record.expires_at,
            "status": record.status,
            "previous_response_id": record.previous_response_id,
            "size_bytes": record.size_bytes,
            "response": record.response.decode(),
            "input_items": record.input_items.decode(),
        }
        dialect = pg_insert if self.db.backend == "postgresql" else sqlite_insert
        statement = dialect(stored_responses).values(values).on_conflict_do_nothing()
        async with self.db.transaction() as conn:
            await conn.execute(statement)

    async def get(self, response_id: str, *, tenant_id: str, now: float) -> StoredResponse | None:
        t = stored_responses.c
        query = select(stored_responses).where(
            t.id == response_id, t.tenant_id == tenant_id, t.expires_at > now
        )
        async with self.db.read() as conn:
            row = (await conn.execute(query)).mappings().first()
        if row is None:
            return None
        return StoredResponse(
            id=row["id"],
            tenant_id=row["tenant_id"],
            key_id=row["key_id"],
            created_at=row["created_at"],
            expires_at=row["expires_at"],
            status=row["status"],
            previous_response_id=row["previous_response_id"],
            response=row["response"].encode(),
            input_items=row["input_items"].encode(),
        )

    async def delete(self, response_id: str, *, tenant_id: str) -> bool:
        t = stored_responses.c
        statement = delete(stored_responses).where(t.id == response_id, t.tenant_id == tenant_id)
        async with self.db.transaction() as conn:
            return bool((await conn.execute(statement)).rowcount)

    async def purge_tenant(self, tenant_id: str) -> int:
        statement = delete(stored_responses).where(stored_responses.c.tenant_id == tenant_id)
        async with self.db.transaction() as conn:
            return int((await conn.execute(statement)).rowcount)

    async def expire(self, *, now: float) -> int:
        """Delete expired rows, ``EXPIRE_BATCH`` a transaction, until none is left."""
        t = stored_responses.c
        removed = 0
        while True:
            batch = select(t.id).where(t.expires_at <= now).limit(EXPIRE_BATCH)
            statement = delete(stored_responses).where(t.id.in_(batch.scalar_subquery()))
            async with self.db.transaction() as conn:
                count = int((await conn.execute(statement)).rowcount)
            removed += count
            if count < EXPIRE_BATCH:
                return removed

    async def count(self, tenant_id: str | None = None) -> int:
        query = select(func.count()).select_from(stored_responses)
        if tenant_id is not None:
            query = query.where(stored_responses.c.tenant_id == tenant_id)
        async with self.db.read() as conn:
            return int((await conn.execute(query)).scalar_one())
