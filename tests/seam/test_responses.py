"""POST /v1/responses through the whole pipeline (create_app, scripted upstream): translated to
chat completions, or passed through to a native pool; the SDK's own types parse every answer and
event; the usage the client sees is the upstream's, and the ledger row says so."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pytest
from openai.types.responses import Response, ResponseStreamEvent
from pydantic import TypeAdapter

from gateway.wire.outcome import Ending
from gateway.wire.usage import UsageSource
from tests.seam.harness import running_gateway
from tests.seam.upstream import Script

RESPONSES = "/v1/responses"
SCRIPTS = {
    "default": Script(),
    "whole": Script(kind="whole"),
    "tool": Script(tool_call=True),
    "tool_whole": Script(kind="whole", tool_call=True),
    "reset": Script(chunks=5, fail_after=2),
    "e400": Script(kind="status", status=400),
}
EVENTS: TypeAdapter[Any] = TypeAdapter(ResponseStreamEvent)


def request(script: str = "default", **extra: Any) -> bytes:
    return orjson.dumps({"model": "m", "input": "hello there", "script": script, **extra})


def events_of(body: bytes) -> list[Any]:
    """Every SSE event, validated strictly against the SDK's union of stream events."""
    found = []
    for block in body.decode().split("\n\n"):
        if not block.strip():
            continue
        kind, data = block.split("\n", 1)
        event = orjson.loads(data.removeprefix("data: "))
        assert kind == f"event: {event['type']}"
        found.append(EVENTS.validate_python(event, strict=True))
    numbers = [e.sequence_number for e in found]
    assert numbers == list(range(len(found)))
    return found


async def test_a_whole_answer_is_a_response_object(tmp_path: Path) -> None:
    async with running_gateway(tmp_path, SCRIPTS) as gw:
        reply = await gw.call(
            RESPONSES, request("whole", instructions="Be brief.", metadata={"a": "b"})
        )
        assert reply.status == 200, reply.body
        response = Response.model_validate(reply.json(), strict=True)
        assert response.output_text == "hi" and response.status == "completed"
        assert response.instructions == "Be brief." and response.metadata == {"a": "b"}
        assert response.usage is not None
        assert (response.usage.input_tokens, response.usage.output_tokens) == (11, 3)
        sent = gw.upstreams[0].sent[-1]
        assert str(sent["url"]).endswith("/v1/chat/completions")
        assert sent["payload"]["messages"] == [  # type: ignore[index]
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": "hello there"},
        ]
    (row,) = gw.ledger_rows()
    assert (row["operation"], row["input_tokens"], row["output_tokens"]) == ("responses", 11, 3)


async def test_a_stream_is_the_responses_event_sequence(tmp_path: Path) -> None:
    async with running_gateway(tmp_path, SCRIPTS) as gw:
        reply = await gw.call(RESPONSES, request(stream=True))
        assert reply.status == 200
        events = events_of(reply.body)
        assert [e.type for e in events] == [
            "response.created",
            "response.in_progress",
            "response.output_item.added",
            "response.content_part.added",
            *["response.output_text.delta"] * 3,
            "response.output_text.done",
            "response.content_part.done",
            "response.output_item.done",
            "response.completed",
        ]
        completed = events[-1].response
        assert completed.output_text == "tok0 tok1 tok2 "
        assert (completed.usage.input_tokens, completed.usage.output_tokens) == (11, 3)
        outcome = reply.outcome
        assert outcome is not None and outcome.usage.source is UsageSource.UPSTREAM
        assert gw.upstreams[0].sent[-1]["payload"]["stream_options"] == {  # type: ignore[index]
            "include_usage": True
        }
    (row,) = gw.ledger_rows()
    assert (row["operation"], row["input_tokens"], row["output_tokens"]) == ("responses", 11, 3)


async def test_a_function_call_streams_its_arguments(tmp_path: Path) -> None:
    tools = [{"type": "function", "name": "lookup", "parameters": {"type": "object"}}]
    async with running_gateway(tmp_path, SCRIPTS) as gw:
        reply = await gw.call(RESPONSES, request("tool", stream=True, tools=tools))
        events = events_of(reply.body)
        kinds = [e.type for e in events]
        assert kinds.count("response.function_call_arguments.delta") == 3
        done = next(e for e in events if e.type == "response.function_call_arguments.done")
        assert done.arguments == '{"city": "Oslo"}'
        (call,) = events[-1].response.output
        assert (call.type, call.call_id, call.name) == ("function_call", "call_1", "lookup")
        sent = gw.upstreams[0].sent[-1]["payload"]
        assert sent["tools"] == [  # type: ignore[index]
            {"type": "function", "function": {"name": "lookup", "parameters": {"type": "object"}}}
        ]
        whole = await gw.call(RESPONSES, request("tool_whole", tools=tools))
        (item,) = Response.model_validate(whole.json(), strict=True).output
        assert item.type == "function_call" and item.arguments == '{"city": "Oslo"}'


async def test_a_stream_cut_mid_way_ends_with_response_failed(tmp_path: Path) -> None:
    async with running_gateway(tmp_path, SCRIPTS) as gw:
        reply = await gw.call(RESPONSES, request("reset", stream=True))
        events = events_of(reply.body)
        assert [e.type for e in events[-2:]] == ["error", "response.failed"]
        assert events[-1].response.error.code == "server_error"
        outcome = reply.outcome
        assert outcome is not None and outcome.ending is Ending.UPSTREAM_FAILED
        assert outcome.usage.partial and outcome.usage.output_tokens > 0
    (row,) = gw.ledger_rows()
    assert row["partial"] and row["operation"] == "responses"


async def test_an_upstream_error_passes_through_untranslated(tmp_path: Path) -> None:
    async with running_gateway(tmp_path, SCRIPTS) as gw:
        reply = await gw.call(RESPONSES, request("e400"))
        assert reply.status == 400 and reply.json()["error"]["message"] == "upstream said no"


async def test_a_native_pool_gets_the_clients_body(tmp_path: Path) -> None:
    pools = {"pd": {"urls": ["http://replica-a:8000"], "responses": "native"}}
    async with running_gateway(tmp_path, SCRIPTS, pools=pools) as gw:
        body = request(stream=True, metadata={"k": "v"})
        reply = await gw.call(RESPONSES, body)
        assert reply.status == 200 and b"resp_native" in reply.body
        sent = gw.upstreams[0].sent[-1]
        assert str(sent["url"]).endswith("/v1/responses")
        assert sent["payload"] == orjson.loads(body)
        whole = await gw.call(RESPONSES, request())
        assert whole.json()["id"] == "resp_native"
    rows = gw.ledger_rows()
    assert [(r["input_tokens"], r["output_tokens"]) for r in rows] == [(13, 3), (13, 3)]


@pytest.mark.parametrize(
    ("extra", "param", "words"),
    [
        ({"store": "yes"}, "store", "must be a boolean"),
        ({"conversation": "conv_1"}, "conversation", "Conversations"),
        ({"tools": [{"type": "web_search"}]}, "tools[0].type", "Built-in tools"),
        ({"tools": [{"type": "file_search"}]}, "tools[0].type", "Built-in tools"),
        ({"background": True}, "background", "Background"),
        ({"input": [{"type": "item_reference", "id": "x"}]}, "input[0].type", "not supported"),
        ({"max_output_tokens": 0}, "max_output_tokens", "Expected a value >= 16"),
        ({"max_output_tokens": 15}, "max_output_tokens", "below minimum value"),
        ({"temperature": 3}, "temperature", "above maximum value"),
        ({"top_logprobs": 30}, "top_logprobs", "Expected a value <= 20"),
        ({"top_p": "high"}, "top_p", "Invalid type"),
        ({"input": [{"role": "wizard", "content": "hi"}]}, "input[0]", "`role`"),
    ],
)
async def test_what_the_gateway_cannot_do_is_a_clear_400(
    tmp_path: Path, extra: dict[str, Any], param: str, words: str
) -> None:
    async with running_gateway(tmp_path, SCRIPTS) as gw:
        reply = await gw.call(RESPONSES, request(**extra))
        assert reply.status == 400
        error = reply.json()["error"]
        assert error["param"] == param and words in error["message"]
        assert gw.upstreams[0].sent == []
    assert gw.ledger_rows() == []


async def test_a_client_that_leaves_mid_stream_is_settled_once(tmp_path: Path) -> None:
    scripts = {**SCRIPTS, "slow": Script(chunks=50, gap=0.005)}
    async with running_gateway(tmp_path, scripts) as gw:
        reply = await gw.call(RESPONSES, request("slow", stream=True), leave_after=3)
        outcome = reply.outcome
        assert outcome is not None and outcome.ending is Ending.CLIENT_GONE
        assert outcome.usage.input_tokens == outcome.prompt_tokens  # counted from the messages
        assert sum(gw.limiter.settled.values()) == 1 and gw.limiter.in_flight() == 0
    (row,) = gw.ledger_rows()
    assert row["status"] == 499 and row["operation"] == "responses"


async def test_a_request_without_model_gets_the_configured_default_or_a_400(
    tmp_path: Path,
) -> None:
    modelless = orjson.dumps({"input": "hello there", "script": "whole"})
    async with running_gateway(tmp_path / "none", SCRIPTS) as gw:
        refused = await gw.call(RESPONSES, modelless)
        assert refused.status == 400 and refused.json()["error"]["param"] == "model"
    async with running_gateway(tmp_path, SCRIPTS, responses={"default_model": "m"}) as gw:
        reply = await gw.call(RESPONSES, modelless)
        assert reply.status == 200, reply.body
        assert reply.json()["model"] == "m"
        sent = gw.upstreams[0].sent[0]["payload"]
        assert isinstance(sent, dict) and sent["model"] == "m"
    (row,) = gw.ledger_rows()
    assert row["model"] == "m"
