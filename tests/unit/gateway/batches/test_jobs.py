"""The batch store on SQLite and on a real PostgreSQL: a batch created whole, lines claimed by
one replica at a time (``FOR UPDATE SKIP LOCKED`` on PostgreSQL), a dead replica's claims taken
back after their lease, a line finished once with its ledger row, a batch finalised once."""

from __future__ import annotations

import asyncio

import orjson
from sqlalchemy import func, select

from gateway.accounting.ledger import UsageRow
from gateway.accounting.ledger_sql import usage_ledger
from gateway.batches.files import FileStore
from gateway.batches.jobs import Answer, BatchRecord, JobStore
from gateway.batches.lines import InputLine
from gateway.database import Database

NOW = 1_800_000_000.0


def record(batch_id: str = "batch_1", total: int = 10, expires: float = NOW + 86400) -> BatchRecord:
    return BatchRecord(
        id=batch_id,
        tenant_id="acme",
        key_id="k1",
        endpoint="/v1/chat/completions",
        input_file_id="file-1",
        completion_window="24h",
        status="in_progress",
        created_at=NOW,
        expires_at=expires,
        total=total,
        completed=0,
        failed=0,
        stamps=(("in_progress", NOW),),
    )


def lines(count: int) -> list[InputLine]:
    body = orjson.dumps({"model": "m", "messages": []})
    return [InputLine(i, f"c{i}", "/v1/chat/completions", body) for i in range(1, count + 1)]


def row(request_id: str) -> UsageRow:
    return UsageRow(NOW, request_id, "acme", "k1", "m", "p", None, 3, 2, 0, None, 1.0, 200, False,
                    batch_id="batch_1")  # fmt: skip


async def ledger_count(db: Database) -> int:
    async with db.read() as conn:
        return int(
            (await conn.execute(select(func.count()).select_from(usage_ledger))).scalar_one()
        )


async def test_two_replicas_claiming_at_once_take_different_lines(migrated: Database) -> None:
    jobs = JobStore(migrated)
    await jobs.create(record(total=40), lines(40))
    claims = await asyncio.gather(
        *(jobs.claim(f"r{i}", now=NOW, lease=60, limit=8) for i in range(4))
    )
    taken = [(c.batch_id, c.line) for claim in claims for c in claim]
    assert len(taken) == 32 and len(set(taken)) == 32
    rest = await jobs.claim("r9", now=NOW, lease=60, limit=100)
    assert len(rest) == 8 and not {(c.batch_id, c.line) for c in rest} & set(taken)
    assert await jobs.claim("r9", now=NOW, lease=60, limit=100) == []


async def test_a_dead_replicas_claims_are_taken_back_after_the_lease(migrated: Database) -> None:
    jobs = JobStore(migrated)
    await jobs.create(record(total=2), lines(2))
    dead = await jobs.claim("dead", now=NOW, lease=30, limit=2)
    assert await jobs.claim("alive", now=NOW + 29, lease=30, limit=2) == []
    again = await jobs.claim("alive", now=NOW + 31, lease=30, limit=2)
    assert [c.line for c in again] == [1, 2]
    # The dead owner's late answer is refused: the line is the new owner's, billed once.
    assert not await jobs.finish(dead[0], Answer(200, b"{}", "late"), [row("late")])
    assert await jobs.finish(again[0], Answer(200, b"{}", "r1"), [row("r1")])
    assert not await jobs.finish(again[0], Answer(200, b"{}", "r1"), [row("r1")])
    assert await ledger_count(migrated) == 1
    got = await jobs.get("batch_1", tenant_id="acme")
    assert got is not None and (got.completed, got.failed) == (1, 0)


async def test_a_batch_is_finalised_once_with_every_line_in_one_file(migrated: Database) -> None:
    jobs = JobStore(migrated)
    await jobs.create(record(total=3), lines(3))
    claimed = await jobs.claim("r", now=NOW, lease=30, limit=3)
    await jobs.finish(claimed[0], Answer(200, b'{"ok": 1}', "a"), [row("a")])
    await jobs.finish(claimed[1], Answer(400, b'{"error": {"code": "x"}}', "b"), [row("b")])
    assert await jobs.due(NOW) == []  # one line still open
    await jobs.finish(claimed[2], Answer(200, b'{"ok": 2}', "c"), [row("c")])
    assert await jobs.due(NOW) == [("batch_1", "completed")]
    results = await asyncio.gather(
        *(jobs.finalize("batch_1", "completed", now=NOW, ttl=3600) for _ in range(3))
    )
    assert sorted(results) == [False, False, True]
    done = await jobs.get("batch_1", tenant_id="acme")
    assert done is not None and done.status == "completed"
    assert done.output_file_id and done.error_file_id
    files = FileStore(migrated)
    output = await files.content(done.output_file_id, tenant_id="acme", now=NOW)
    errors = await files.content(done.error_file_id, tenant_id="acme", now=NOW)
    assert output is not None and errors is not None
    assert [orjson.loads(x)["custom_id"] for x in output.splitlines()] == ["c1", "c3"]
    assert [orjson.loads(x)["error"]["code"] for x in errors.splitlines()] == ["x"]


async def test_a_batch_past_its_window_expires_with_what_it_did(migrated: Database) -> None:
    jobs = JobStore(migrated)
    await jobs.create(record(total=3, expires=NOW + 10), lines(3))
    claimed = await jobs.claim("r", now=NOW, lease=30, limit=1)
    await jobs.finish(claimed[0], Answer(200, b"{}", "a"), [row("a")])
    assert await jobs.claim("r", now=NOW + 11, lease=30, limit=5) == []  # no new line past it
    assert await jobs.due(NOW + 11) == [("batch_1", "expired")]
    assert await jobs.finalize("batch_1", "expired", now=NOW + 11, ttl=3600)
    done = await jobs.get("batch_1", tenant_id="acme")
    assert done is not None and done.status == "expired" and done.error_file_id
    errors = await FileStore(migrated).content(done.error_file_id, tenant_id="acme", now=NOW)
    assert errors is not None
    assert [orjson.loads(x)["error"]["code"] for x in errors.splitlines()] == ["batch_expired"] * 2


async def test_a_cancelled_batch_stops_claiming_and_keeps_what_it_did(migrated: Database) -> None:
    jobs = JobStore(migrated)
    await jobs.create(record(total=2), lines(2))
    claimed = await jobs.claim("r", now=NOW, lease=30, limit=1)
    assert await jobs.cancel("batch_1", tenant_id="other", now=NOW) is None
    cancelling = await jobs.cancel("batch_1", tenant_id="acme", now=NOW)
    assert cancelling is not None and cancelling.status == "cancelling"
    assert await jobs.claim("r", now=NOW, lease=30, limit=5) == []
    assert await jobs.finish(claimed[0], Answer(200, b"{}", "a"), [row("a")])
    assert await jobs.due(NOW) == [("batch_1", "cancelled")]
    assert await jobs.finalize("batch_1", "cancelled", now=NOW, ttl=3600)
    done = await jobs.get("batch_1", tenant_id="acme")
    assert done is not None and done.status == "cancelled" and done.output_file_id
    assert done.to_json()["cancelled_at"] == int(NOW)


async def test_a_live_owner_renews_its_claims_and_keeps_them(migrated: Database) -> None:
    jobs = JobStore(migrated)
    await jobs.create(record(total=2), lines(2))
    mine = await jobs.claim("alive", now=NOW, lease=30, limit=2)
    assert await jobs.renew("alive", now=NOW + 20, lease=30) == 2
    assert await jobs.claim("other", now=NOW + 40, lease=30, limit=2) == []  # renewed to +50
    assert await jobs.finish(mine[0], Answer(200, b"{}", "a"), [row("a")])
    assert await jobs.renew("alive", now=NOW + 100, lease=30) == 0  # expired: not revived
