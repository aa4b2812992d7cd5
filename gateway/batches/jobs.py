"""Batches and their lines in the shared store: created whole, claimed under leases, finished
once, finalised once::

    jobs = JobStore(database)
    await jobs.create(record, lines)                 # the batch and every line, one transaction
    claimed = await jobs.claim("replica-a", now=t, lease=300, limit=16)
    done = await jobs.finish(claimed[0], answer, ledger_rows)  # False: the lease was lost
    await jobs.release(claimed[1])                   # not now (no room): queued again
    await jobs.finalize(batch_id, "completed", now=t, ttl=...)  # output and error files

A claim takes lines whose batch is ``in_progress`` and that are ``queued``, or ``claimed`` with
a lease that ran out (their replica died). On PostgreSQL the candidate rows are locked with
``FOR UPDATE SKIP LOCKED``, so replicas claiming at once take different lines; SQLite's
``BEGIN IMMEDIATE`` serialises writers (a single replica). A line is marked ``done`` only by the
owner of an unexpired claim, in the transaction that writes its ledger row: a line counts once.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

import orjson
from sqlalchemy import and_, func, or_, select, tuple_, update
from sqlalchemy.ext.asyncio import AsyncConnection

from gateway.accounting.ledger import UsageRow
from gateway.accounting.ledger_sql import write_rows
from gateway.batches.files import FileRecord, insert_file
from gateway.batches.lines import InputLine, failed_line, output_line
from gateway.batches.schema import batch_lines, batches
from gateway.database.database import Database
from gateway.values import value

Json = dict[str, Any]
ACTIVE = ("validating", "in_progress", "finalizing", "cancelling")
FINAL = ("completed", "failed", "expired", "cancelled")
_STAMPS = (
    "in_progress",
    "finalizing",
    "completed",
    "failed",
    "expired",
    "cancelling",
    "cancelled",
)


@value
class BatchRecord:
    id: str
    tenant_id: str
    key_id: str | None
    endpoint: str
    input_file_id: str
    completion_window: str
    status: str
    created_at: float
    expires_at: float
    total: int
    completed: int
    failed: int
    metadata: Json | None = None
    errors: list[Json] | None = None
    model: str | None = None
    output_file_id: str | None = None
    error_file_id: str | None = None
    stamps: tuple[tuple[str, float], ...] = ()
    """``(status, at)`` for each status it reached after ``created``."""

    def to_json(self) -> Json:
        """OpenAI's ``batch`` object. A field with no value yet is left out: OpenAI's document
        types them as strings and integers, not nullable (the SDK reads an absent one as None)."""
        stamps = dict(self.stamps)
        whole = {
            "id": self.id,
            "object": "batch",
            "endpoint": self.endpoint,
            "model": self.model,
            "errors": None if not self.errors else {"object": "list", "data": self.errors},
            "input_file_id": self.input_file_id,
            "completion_window": self.completion_window,
            "status": self.status,
            "output_file_id": self.output_file_id,
            "error_file_id": self.error_file_id,
            "created_at": int(self.created_at),
            "expires_at": int(self.expires_at),
            **{f"{s}_at": _int(stamps.get(s)) for s in _STAMPS},
            "request_counts": {
                "total": self.total,
                "completed": self.completed,
                "failed": self.failed,
            },
            "metadata": self.metadata,
        }
        return {key: value for key, value in whole.items() if value is not None}


@value
class ClaimedLine:
    batch_id: str
    line: int
    custom_id: str
    body: bytes
    owner: str
    tenant_id: str
    key_id: str | None
    endpoint: str
    expires_at: float


@value
class Answer:
    """What a line got: its status, the answer's body, the request's id."""

    status: int
    body: bytes
    request_id: str

    @property
    def failed(self) -> bool:
        return not 200 <= self.status < 300


def _int(at: float | None) -> int | None:
    return None if at is None else int(at)


def _batch(row: Any) -> BatchRecord:
    return BatchRecord(
        id=row["id"],
        tenant_id=row["tenant_id"],
        key_id=row["key_id"],
        endpoint=row["endpoint"],
        input_file_id=row["input_file_id"],
        completion_window=row["completion_window"],
        status=row["status"],
        created_at=row["created_at"],
        expires_at=row["expires_at"],
        total=row["total"],
        completed=row["completed"],
        failed=row["failed"],
        metadata=None if row["metadata"] is None else orjson.loads(row["metadata"]),
        errors=None if row["errors"] is None else orjson.loads(row["errors"]),
        model=row["model"],
        output_file_id=row["output_file_id"],
        error_file_id=row["error_file_id"],
        stamps=tuple((s, row[f"{s}_at"]) for s in _STAMPS if row[f"{s}_at"] is not None),
    )


class JobStore:
    def __init__(self, db: Database) -> None:
        self.db = db

    async def create(self, record: BatchRecord, lines: Sequence[InputLine]) -> None:
        """The batch and all its lines, or nothing."""
        values = {
            "id": record.id,
            "tenant_id": record.tenant_id,
            "key_id": record.key_id,
            "endpoint": record.endpoint,
            "input_file_id": record.input_file_id,
            "completion_window": record.completion_window,
            "status": record.status,
            "created_at": record.created_at,
            "expires_at": record.expires_at,
            "total": record.total,
            "completed": 0,
            "failed": 0,
            "metadata": None if record.metadata is None else orjson.dumps(record.metadata).decode(),
            "errors": None if not record.errors else orjson.dumps(record.errors).decode(),
            "model": record.model,
            **{f"{s}_at": at for s, at in record.stamps},
        }
        rows = [
            {
                "batch_id": record.id,
                "line": line.number,
                "custom_id": line.custom_id,
                "body": line.body.decode(),
                "state": "queued",
            }
            for line in lines
        ]
        async with self.db.transaction() as conn:
            await conn.execute(batches.insert().values(**values))
            for start in range(0, len(rows), 1000):
                await conn.execute(batch_lines.insert(), rows[start : start + 1000])

    async def get(self, batch_id: str, *, tenant_id: str) -> BatchRecord | None:
        t = batches.c
        query = select(batches).where(t.id == batch_id, t.tenant_id == tenant_id)
        async with self.db.read() as conn:
            row = (await conn.execute(query)).mappings().first()
        return None if row is None else _batch(row)

    async def page(
        self, *, tenant_id: str, limit: int, after: str | None
    ) -> tuple[list[BatchRecord], bool]:
        """Newest first; ``after``: the id of the last batch of the previous page."""
        t = batches.c
        query = select(batches).where(t.tenant_id == tenant_id)
        async with self.db.read() as conn:
            if after is not None:
                cursor = (
                    await conn.execute(
                        select(t.created_at).where(t.id == after, t.tenant_id == tenant_id)
                    )
                ).scalar_one_or_none()
                if cursor is not None:
                    query = query.where(tuple_(t.created_at, t.id) < tuple_(cursor, after))
            query = query.order_by(t.created_at.desc(), t.id.desc()).limit(limit + 1)
            records = [_batch(r) for r in (await conn.execute(query)).mappings()]
        return records[:limit], len(records) > limit

    async def active(self, tenant_id: str) -> int:
        t = batches.c
        query = select(func.count()).where(t.tenant_id == tenant_id, t.status.in_(ACTIVE))
        async with self.db.read() as conn:
            return int((await conn.execute(query)).scalar_one())

    async def cancel(self, batch_id: str, *, tenant_id: str, now: float) -> BatchRecord | None:
        """``cancelling`` from ``validating`` or ``in_progress``; a batch already past them is
        returned as it is (None: not this tenant's)."""
        t = batches.c
        async with self.db.transaction() as conn:
            await conn.execute(
                update(batches)
                .where(
                    t.id == batch_id,
                    t.tenant_id == tenant_id,
                    t.status.in_(("validating", "in_progress")),
                )
                .values(status="cancelling", cancelling_at=now)
            )
        return await self.get(batch_id, tenant_id=tenant_id)

    # --- the runner's side ------------------------------------------------------------------

    async def claim(self, owner: str, *, now: float, lease: float, limit: int) -> list[ClaimedLine]:
        line, batch = batch_lines.c, batches.c
        free = or_(
            line.state == "queued",
            and_(line.state == "claimed", line.lease_until < now),
        )
        query = (
            select(
                line.batch_id,
                line.line,
                line.custom_id,
                line.body,
                batch.tenant_id,
                batch.key_id,
                batch.endpoint,
                batch.expires_at,
            )
            .join(batches, batch.id == line.batch_id)
            .where(batch.status == "in_progress", batch.expires_at > now, free)
            .order_by(batch.created_at, line.batch_id, line.line)
            .limit(limit)
        )
        if self.db.backend == "postgresql":
            query = query.with_for_update(of=batch_lines, skip_locked=True)
        async with self.db.transaction() as conn:
            rows = (await conn.execute(query)).mappings().all()
            keys = [(r["batch_id"], r["line"]) for r in rows]
            if keys:
                await conn.execute(
                    update(batch_lines)
                    .where(tuple_(line.batch_id, line.line).in_(keys))
                    .values(state="claimed", owner=owner, lease_until=now + lease)
                )
        return [
            ClaimedLine(
                r["batch_id"],
                r["line"],
                r["custom_id"],
                str(r["body"]).encode(),
                owner,
                r["tenant_id"],
                r["key_id"],
                r["endpoint"],
                r["expires_at"],
            )
            for r in rows
        ]

    async def finish(
        self, claimed: ClaimedLine, answer: Answer, ledger: Sequence[UsageRow]
    ) -> bool:
        """Mark the line done with its answer and write its ledger row, in one transaction;
        False (nothing written) when the claim is no longer this owner's."""
        line, batch = batch_lines.c, batches.c
        async with self.db.transaction() as conn:
            marked = await conn.execute(
                update(batch_lines)
                .where(
                    line.batch_id == claimed.batch_id,
                    line.line == claimed.line,
                    line.state == "claimed",
                    line.owner == claimed.owner,
                )
                .values(
                    state="done",
                    request_id=answer.request_id,
                    status_code=answer.status,
                    failed=answer.failed,
                    result=answer.body.decode("utf-8", "replace"),
                )
            )
            if not marked.rowcount:
                return False
            counter = batch.failed if answer.failed else batch.completed
            await conn.execute(
                update(batches)
                .where(batch.id == claimed.batch_id)
                .values({counter.name: counter + 1})
            )
            if ledger:
                await write_rows(conn, self.db.backend, ledger)
        return True

    async def renew(self, owner: str, *, now: float, lease: float) -> int:
        """Extend every live claim of ``owner`` (its lines still running); how many."""
        line = batch_lines.c
        async with self.db.transaction() as conn:
            renewed = await conn.execute(
                update(batch_lines)
                .where(line.owner == owner, line.state == "claimed", line.lease_until >= now)
                .values(lease_until=now + lease)
            )
        return int(renewed.rowcount)

    async def release(self, claimed: ClaimedLine) -> None:
        """Queued again (no room, or the key's limits said not now): runs later, maybe elsewhere."""
        line = batch_lines.c
        async with self.db.transaction() as conn:
            await conn.execute(
                update(batch_lines)
                .where(
                    line.batch_id == claimed.batch_id,
                    line.line == claimed.line,
                    line.state == "claimed",
                    line.owner == claimed.owner,
                )
                .values(state="queued", owner=None, lease_until=None)
            )

    async def queued(self) -> int:
        """Lines not done yet, of every batch in progress (the metric)."""
        line = batch_lines.c
        query = select(func.count()).where(line.state != "done")
        async with self.db.read() as conn:
            return int((await conn.execute(query)).scalar_one())

    async def due(self, now: float) -> list[tuple[str, str]]:
        """``(batch id, final status)`` of the batches ready to be finalised: every line done
        (completed), past the window (expired), or cancelling (cancelled)."""
        t, line = batches.c, batch_lines.c
        open_lines = (
            select(func.count())
            .where(line.batch_id == t.id, line.state != "done")
            .scalar_subquery()
        )
        query = select(t.id, t.status, t.expires_at, open_lines.label("open")).where(
            t.status.in_(("in_progress", "cancelling"))
        )
        async with self.db.read() as conn:
            rows = (await conn.execute(query)).mappings().all()
        due: list[tuple[str, str]] = []
        for row in rows:
            if row["status"] == "cancelling":
                due.append((row["id"], "cancelled"))
            elif row["open"] == 0:
                due.append((row["id"], "completed"))
            elif row["expires_at"] <= now:
                due.append((row["id"], "expired"))
        return due

    async def finalize(self, batch_id: str, status: str, *, now: float, ttl: float) -> bool:
        """Write the output and error files and the final status, once (False: another replica
        did, or the batch moved on). Lines that never ran go to the error file."""
        t = batches.c
        async with self.db.transaction() as conn:
            row = (await conn.execute(select(batches).where(t.id == batch_id))).mappings().first()
            if row is None or row["status"] not in ("in_progress", "cancelling"):
                return False
            record = _batch(row)
            # The compare-and-set: a second finaliser's update matches nothing.
            moved = await conn.execute(
                update(batches)
                .where(t.id == batch_id, t.status == record.status)
                .values(status=status, finalizing_at=now, **{f"{status}_at": now})
            )
            if not moved.rowcount:
                return False
            output, errors = await _results(conn, record, status)
            ids = {}
            for kind, content in (("output_file_id", output), ("error_file_id", errors)):
                if content:
                    ids[kind] = await _file(conn, record, content, now, ttl)
            await conn.execute(update(batches).where(t.id == batch_id).values(**ids))
            await conn.execute(batch_lines.delete().where(batch_lines.c.batch_id == batch_id))
        return True


async def _results(conn: AsyncConnection, record: BatchRecord, status: str) -> tuple[bytes, bytes]:
    line = batch_lines.c
    query = select(batch_lines).where(line.batch_id == record.id).order_by(line.line)
    output: list[bytes] = []
    errors: list[bytes] = []
    code, why = (
        ("batch_expired", "This request could not be executed before the completion window.")
        if status == "expired"
        else ("batch_cancelled", "The batch was cancelled before this request ran.")
    )
    for row in (await conn.execute(query)).mappings():
        if row["state"] != "done":
            errors.append(failed_line(row["custom_id"], record.id, code, why))
            continue
        built = output_line(
            row["custom_id"],
            record.id,
            int(row["status_code"]),
            str(row["request_id"]),
            str(row["result"]).encode(),
        )
        (errors if row["failed"] else output).append(built)
    return _jsonl(output), _jsonl(errors)


def _jsonl(lines: list[bytes]) -> bytes:
    return b"".join(line + b"\n" for line in lines)


async def _file(
    conn: AsyncConnection, record: BatchRecord, content: bytes, now: float, ttl: float
) -> str:
    file_id = new_file_id()
    kept = FileRecord(
        id=file_id,
        tenant_id=record.tenant_id,
        purpose="batch_output",
        filename=f"{record.id}_output.jsonl",
        bytes=len(content),
        lines=content.count(b"\n"),
        created_at=now,
        expires_at=now + ttl,
    )
    await insert_file(conn, kept, content)
    return file_id


def new_file_id() -> str:
    return "file-" + os.urandom(12).hex()


def new_batch_id() -> str:
    return "batch_" + os.urandom(12).hex()
