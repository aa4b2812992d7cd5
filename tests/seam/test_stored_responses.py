"""Stored responses through the whole pipeline (create_app, scripted upstream, SQLite store):
kept once finished (whole, streamed, cut), continued with ``previous_response_id`` (the upstream
gets the whole conversation, and it is counted as such), read back, listed, deleted, expired on
the injected clock, and bounded. The SDK's own types parse every object."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import orjson
from openai.types.responses import Response, ResponseItem
from pydantic import TypeAdapter

from gateway.runtime.state import GatewayState
from gateway.wire.outcome import Ending
from tests.seam.harness import Gateway, running_gateway
from tests.seam.test_responses import events_of
from tests.seam.upstream import Script

RESPONSES = "/v1/responses"
SCRIPTS = {
    "default": Script(),
    "whole": Script(kind="whole"),
    "tool_whole": Script(kind="whole", tool_call=True),
    "reset": Script(chunks=5, fail_after=2),
    "slow": Script(chunks=50, gap=0.005),
}
ITEMS: TypeAdapter[list[ResponseItem]] = TypeAdapter(list[ResponseItem])
TOOLS = [{"type": "function", "name": "lookup", "parameters": {"type": "object"}}]


def body(script: str = "whole", **extra: Any) -> bytes:
    return orjson.dumps({"model": "m", "input": "hello there", "script": script, **extra})


def stored_rows(path: Path) -> list[sqlite3.Row]:
    with sqlite3.connect(path) as db:
        db.row_factory = sqlite3.Row
        return db.execute("SELECT * FROM stored_responses ORDER BY created_at").fetchall()


async def create(gw: Gateway, payload: bytes) -> dict[str, Any]:
    reply = await gw.call(RESPONSES, payload)
    assert reply.status == 200, reply.body
    if reply.headers.get(b"content-type") == b"text/event-stream":
        events_of(reply.body)  # every event valid
        last = reply.body.decode().strip().split("\n\n")[-1]
        return orjson.loads(last.split("data: ", 1)[1])["response"]  # type: ignore[no-any-return]
    return reply.json()  # type: ignore[no-any-return]


async def test_a_whole_response_is_stored_and_read_back(tmp_path: Path) -> None:
    async with running_gateway(tmp_path, SCRIPTS) as gw:
        made = await create(gw, body(metadata={"k": "v"}))
        assert made["store"] is True and made["previous_response_id"] is None
        got = await gw.get(f"{RESPONSES}/{made['id']}")
        assert got.status == 200 and got.json() == made
        Response.model_validate(got.json(), strict=True)
        listing = (await gw.get(f"{RESPONSES}/{made['id']}/input_items")).json()
        (item,) = ITEMS.validate_python(listing["data"])
        assert item.type == "message" and item.role == "user"
        assert item.content[0].type == "input_text" and item.content[0].text == "hello there"
        assert listing["first_id"] == listing["last_id"] == item.id and not listing["has_more"]
    (row,) = stored_rows(gw.db_path)
    assert (row["id"], row["status"], row["tenant_id"]) == (made["id"], "completed", "")


async def test_store_false_keeps_nothing(tmp_path: Path) -> None:
    async with running_gateway(tmp_path, SCRIPTS) as gw:
        made = await create(gw, body(store=False))
        assert made["store"] is False
        missing = await gw.get(f"{RESPONSES}/{made['id']}")
        assert missing.status == 404 and "not found" in missing.json()["error"]["message"]
        follow = await gw.call(RESPONSES, body(previous_response_id=made["id"]))
        assert follow.status == 404
        assert follow.json()["error"]["param"] == "previous_response_id"
    assert stored_rows(gw.db_path) == []


async def test_a_stream_is_stored_once_it_completed(tmp_path: Path) -> None:
    async with running_gateway(tmp_path, SCRIPTS) as gw:
        made = await create(gw, body("default", stream=True))
        got = (await gw.get(f"{RESPONSES}/{made['id']}")).json()
        assert got["status"] == "completed" and got["output"] == made["output"]
        assert Response.model_validate(got).output_text == "tok0 tok1 tok2 "
    assert len(stored_rows(gw.db_path)) == 1


async def test_three_turns_with_a_function_call_round_trip(tmp_path: Path) -> None:
    """Turn 1 asks and gets a call; turn 2 sends the call's output only; turn 3 asks again.
    Each follow-up reaches the upstream as the whole conversation, counted as such, and the
    instructions are each request's own (the API does not carry them over)."""
    async with running_gateway(tmp_path, SCRIPTS) as gw:
        first = await create(gw, body("tool_whole", tools=TOOLS, instructions="Be brief."))
        (call,) = first["output"]
        assert call["type"] == "function_call" and call["call_id"] == "call_1"
        output = {"type": "function_call_output", "call_id": "call_1", "output": '{"sky": "clear"}'}
        second = await create(
            gw, body("whole", input=[output], tools=TOOLS, previous_response_id=first["id"])
        )
        assert second["previous_response_id"] == first["id"] and second["instructions"] is None
        third = await create(
            gw,
            body(
                "default",
                input="And tomorrow?",
                stream=True,
                tools=TOOLS,
                tool_choice="none",
                previous_response_id=second["id"],
            ),
        )
        sent = [s["payload"]["messages"] for s in gw.upstreams[0].sent]  # type: ignore[index]
        assert sent[0] == [
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": "hello there"},
        ]
        tool_calls = [
            {
                "id": "call_1",
                "type": "function",
                "function": {"name": "lookup", "arguments": '{"city": "Oslo"}'},
            }
        ]
        assert sent[1] == [
            {"role": "user", "content": "hello there"},
            {"role": "assistant", "content": None, "tool_calls": tool_calls},
            {"role": "tool", "tool_call_id": "call_1", "content": '{"sky": "clear"}'},
        ]
        assert sent[2] == [*sent[1], {"role": "assistant", "content": "hi"}, {
            "role": "user", "content": "And tomorrow?"}]  # fmt: skip
        counted = [o.prompt_tokens for o in gw.outcomes]
        assert counted[0] is not None and counted[1] is not None and counted[2] is not None
        assert counted[2] > counted[1]  # admitted as the whole conversation
        listing = (await gw.get(f"{RESPONSES}/{third['id']}/input_items?order=asc")).json()
        items = ITEMS.validate_python(listing["data"])
        assert [i.type for i in items] == [
            "message", "function_call", "function_call_output", "message", "message",
        ]  # fmt: skip
        assert items[1].id == call["id"] and items[3].id == second["output"][0]["id"]
        assert len({i.id for i in items}) == 5
    assert [r["previous_response_id"] for r in stored_rows(gw.db_path)] == [
        None,
        first["id"],
        second["id"],
    ]


async def test_input_items_pages_as_the_api_does(tmp_path: Path) -> None:
    async with running_gateway(tmp_path, SCRIPTS) as gw:
        turn = await create(gw, body())
        for text in ("two", "three"):
            turn = await create(gw, body(input=text, previous_response_id=turn["id"]))
        path = f"{RESPONSES}/{turn['id']}/input_items"
        newest = (await gw.get(f"{path}?limit=2")).json()  # desc by default
        assert [i["content"][0]["text"] for i in newest["data"]] == ["three", "hi"]
        assert newest["has_more"] is True
        rest = (await gw.get(f"{path}?limit=2&after={newest['last_id']}")).json()
        assert [i["content"][0]["text"] for i in rest["data"]] == ["two", "hi"]
        last = (await gw.get(f"{path}?limit=2&after={rest['last_id']}")).json()
        assert [i["content"][0]["text"] for i in last["data"]] == ["hello there"]
        assert last["has_more"] is False
        for bad in ("limit=0", "limit=101", "order=up", "after=nope"):
            assert (await gw.get(f"{path}?{bad}")).status == 400, bad


async def test_delete_then_it_is_gone(tmp_path: Path) -> None:
    async with running_gateway(tmp_path, SCRIPTS) as gw:
        made = await create(gw, body())
        deleted = await gw.get(f"{RESPONSES}/{made['id']}", method="DELETE")
        assert deleted.status == 200
        assert deleted.json() == {"id": made["id"], "object": "response.deleted", "deleted": True}
        assert (await gw.get(f"{RESPONSES}/{made['id']}")).status == 404
        assert (await gw.get(f"{RESPONSES}/{made['id']}", method="DELETE")).status == 404
        assert (await gw.call(RESPONSES, body(previous_response_id=made["id"]))).status == 404


async def test_a_cut_stream_is_stored_with_its_status(tmp_path: Path) -> None:
    async with running_gateway(tmp_path, SCRIPTS) as gw:
        failed = await gw.call(RESPONSES, body("reset", stream=True))
        failed_id = events_of(failed.body)[0].response.id
        left = await gw.call(RESPONSES, body("slow", stream=True), leave_after=3)
        assert left.outcome is not None and left.outcome.ending is Ending.CLIENT_GONE
        got = (await gw.get(f"{RESPONSES}/{failed_id}")).json()
        assert got["status"] == "failed" and got["error"]["code"] == "server_error"
    # The client that left: kept in the background, written before the gateway stopped.
    rows = {r["status"]: r for r in stored_rows(gw.db_path)}
    assert set(rows) == {"failed", "cancelled"}
    Response.model_validate(orjson.loads(rows["cancelled"]["response"]), strict=True)


async def test_expired_responses_are_gone_and_swept(tmp_path: Path) -> None:
    config = {"responses": {"ttl_seconds": 3600, "expiry_interval": 3600}}
    async with running_gateway(tmp_path, SCRIPTS, **config) as gw:
        made = await create(gw, body())
        gw.clock.advance(3599)  # the app's injected clock
        assert (await gw.get(f"{RESPONSES}/{made['id']}")).status == 200
        gw.clock.advance(2)
        assert (await gw.get(f"{RESPONSES}/{made['id']}")).status == 404
        assert (await gw.call(RESPONSES, body(previous_response_id=made["id"]))).status == 404
        assert len(stored_rows(gw.db_path)) == 1  # unreadable, not yet swept
        assert await _state(gw).responses.sweep() == 1
        assert stored_rows(gw.db_path) == []


async def test_what_one_response_may_store_is_bounded(tmp_path: Path) -> None:
    config = {"responses": {"max_bytes": 1024}}
    async with running_gateway(tmp_path, SCRIPTS, **config) as gw:
        big = await gw.call(RESPONSES, body(input="x" * 2000))
        assert big.status == 400 and big.json()["error"]["code"] == "conversation_too_large"
        assert gw.upstreams[0].sent == []
        unstored = await create(gw, body(input="x" * 2000, store=False))  # nothing to keep
        assert unstored["status"] == "completed"
        # The conversation fits, the response object takes it over: answered, not stored.
        fits = await create(gw, body(input="y" * 300))
        assert (await gw.get(f"{RESPONSES}/{fits['id']}")).status == 404
        assert _state(gw).responses.kept.labels("too_large").value == 1
    assert stored_rows(gw.db_path) == []


async def test_with_storing_off_the_gateway_refuses_state(tmp_path: Path) -> None:
    async with running_gateway(tmp_path, SCRIPTS, responses={"store": False}) as gw:
        made = await create(gw, body())
        assert made["store"] is False
        for extra in ({"store": True}, {"previous_response_id": made["id"]}):
            refused = await gw.call(RESPONSES, body(**extra))
            assert refused.status == 400 and "does not store" in refused.json()["error"]["message"]
    assert stored_rows(gw.db_path) == []


def _state(gw: Gateway) -> GatewayState:
    return gw.state
