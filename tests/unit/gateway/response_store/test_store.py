"""The stored responses' SQL store, the same tests on SQLite and on a real PostgreSQL server:
tenant-scoped reads and deletes, expiry (reads at once, rows by the sweep, in batches), purge,
and a repeated write that changes nothing. Then the service's turn on both: a follow-up of
another tenant's response is the 404 of one that does not exist."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from gateway.database import Database
from gateway.errors import NotFound
from gateway.metrics import GatewayMetrics
from gateway.response_store import store as store_module
from gateway.response_store.config import ResponsesConfig
from gateway.response_store.service import StoredResponses
from gateway.response_store.store import SqlResponseStore, StoredResponse
from gateway.wire.request import DEFAULT_SHAPE

NOW = 1_800_000_000.0


def record(response_id: str, tenant: str = "acme", expires: float = NOW + 60) -> StoredResponse:
    response: dict[str, Any] = {"id": response_id, "object": "response", "status": "completed"}
    response["output"] = [
        {"type": "message", "id": "msg_o", "role": "assistant", "status": "completed",
         "content": [{"type": "output_text", "text": "hello", "annotations": []}]},
    ]  # fmt: skip
    items = [{"type": "message", "id": "msg_i", "role": "user", "content": "hi"}]
    return StoredResponse(
        id=response_id,
        tenant_id=tenant,
        key_id="key1",
        created_at=NOW,
        expires_at=expires,
        status="completed",
        previous_response_id=None,
        response=orjson.dumps(response),
        input_items=orjson.dumps(items),
    )


async def test_a_response_is_its_tenants_alone(migrated: Database) -> None:
    store = SqlResponseStore(migrated)
    await store.put(record("resp_a"))
    got = await store.get("resp_a", tenant_id="acme", now=NOW)
    assert got == record("resp_a")
    assert await store.get("resp_a", tenant_id="other", now=NOW) is None
    assert await store.delete("resp_a", tenant_id="other") is False
    assert await store.get("resp_a", tenant_id="acme", now=NOW) is not None
    assert await store.delete("resp_a", tenant_id="acme") is True
    assert await store.get("resp_a", tenant_id="acme", now=NOW) is None


async def test_a_second_write_of_an_id_changes_nothing(migrated: Database) -> None:
    store = SqlResponseStore(migrated)
    await store.put(record("resp_a"))
    await store.put(record("resp_a", tenant="other"))
    assert await store.get("resp_a", tenant_id="other", now=NOW) is None
    assert await store.count() == 1


async def test_expired_rows_are_unreadable_then_swept_in_batches(
    migrated: Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(store_module, "EXPIRE_BATCH", 2)
    store = SqlResponseStore(migrated)
    for i in range(5):
        await store.put(record(f"resp_old{i}", expires=NOW + 10))
    await store.put(record("resp_new", expires=NOW + 100))
    assert await store.get("resp_old0", tenant_id="acme", now=NOW + 10) is None
    assert await store.expire(now=NOW + 10) == 5
    assert await store.count() == 1
    assert await store.get("resp_new", tenant_id="acme", now=NOW + 10) is not None


async def test_a_purge_removes_one_tenants_responses(migrated: Database) -> None:
    store = SqlResponseStore(migrated)
    for i in range(3):
        await store.put(record(f"resp_a{i}"))
    await store.put(record("resp_b", tenant="other"))
    assert await store.purge_tenant("acme") == 3
    assert await store.count("acme") == 0 and await store.count("other") == 1


async def test_continuing_another_tenants_response_is_not_found(migrated: Database) -> None:
    service = StoredResponses(ResponsesConfig(), migrated, GatewayMetrics(), clock=lambda: NOW)
    await service.store.put(record("resp_a"))
    body = orjson.dumps({"model": "m", "input": "again", "previous_response_id": "resp_a"})
    request, turn = await service.parse(body, "req2", "acme", "key1", 1000, DEFAULT_SHAPE)
    assert [m["content"] for m in request.payload["messages"]] == ["hi", "hello", "again"]
    assert turn.previous_response_id == "resp_a" and turn.stored
    with pytest.raises(NotFound) as caught:
        await service.parse(body, "req3", "other", "key9", 1000, DEFAULT_SHAPE)
    assert caught.value.param == "previous_response_id"
