"""Chat chunks -> Responses events, one chunk at a time; every event checked strictly against
the openai SDK's own types, and the sequence numbers counted."""

from __future__ import annotations

from typing import Any

import orjson
from openai.types.responses import Response, ResponseStreamEvent
from pydantic import TypeAdapter

from gateway.errors import UpstreamError
from gateway.responses_translation.objects import ResponseShell, response_of_chat
from gateway.responses_translation.stream import ResponseEvents
from gateway.responses_translation.translator import ResponsesTranslator, sse_events
from gateway.wire.meter import StreamMeter
from gateway.wire.usage import Usage

EVENTS: TypeAdapter[Any] = TypeAdapter(ResponseStreamEvent)
SOURCE = {"model": "m", "input": "hi", "tools": [{"type": "function", "name": "f"}]}


def shell() -> ResponseShell:
    return ResponseShell.of(SOURCE, request_id="abc", created_at=1_700_000_000)


def text(content: str, finish: str | None = None) -> dict[str, Any]:
    return {"choices": [{"index": 0, "delta": {"content": content}, "finish_reason": finish}]}


def call(index: int, arguments: str, call_id: str | None = None, name: str = "f") -> dict[str, Any]:
    tool: dict[str, Any] = {"index": index, "function": {"arguments": arguments}}
    if call_id is not None:
        tool.update(id=call_id, type="function")
        tool["function"]["name"] = name
    return {"choices": [{"index": 0, "delta": {"tool_calls": [tool]}, "finish_reason": None}]}


def typed(events: list[dict[str, Any]]) -> list[Any]:
    return [EVENTS.validate_python(e, strict=True) for e in events]


def test_text_chunk_by_chunk() -> None:
    events = ResponseEvents(shell())
    opening = typed(events.opening())
    assert [e.type for e in opening] == ["response.created", "response.in_progress"]
    assert opening[0].response.status == "in_progress" and opening[0].response.id == "resp_abc"
    role = events.chunk({"choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}]})
    assert role == []  # nothing to say yet
    first = typed(events.chunk(text("Hel")))
    assert [e.type for e in first] == [
        "response.output_item.added",
        "response.content_part.added",
        "response.output_text.delta",
    ]
    assert first[0].item.id == first[2].item_id == "msg_abc000"
    second = typed(events.chunk(text("lo", finish="stop")))
    assert [(e.type, e.delta) for e in second] == [("response.output_text.delta", "lo")]
    assert events.chunk({"choices": [], "usage": {"prompt_tokens": 4}}) == []
    closing = typed(events.closing(Usage(4, 2, 1)))
    assert [e.type for e in closing] == [
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
        "response.completed",
    ]
    assert closing[0].text == "Hello" and closing[1].part.text == "Hello"
    final = closing[-1].response
    assert final.output_text == "Hello" and final.status == "completed"
    assert final.usage.input_tokens == 4 and final.usage.output_tokens == 2
    assert final.usage.input_tokens_details.cached_tokens == 1 and final.usage.total_tokens == 6
    numbers = [e.sequence_number for e in [*opening, *first, *second, *closing]]
    assert numbers == list(range(len(numbers)))
    assert events.closing(None) == [] and events.chunk(text("late")) == []


def test_a_length_cut_is_incomplete() -> None:
    events = ResponseEvents(shell())
    events.opening()
    events.chunk(text("abc", finish="length"))
    *items, last = typed(events.closing(Usage(1, 1)))
    assert last.type == "response.incomplete"
    assert last.response.incomplete_details.reason == "max_output_tokens"
    assert items[-1].item.status == "incomplete"


def test_text_then_two_tool_calls() -> None:
    events = ResponseEvents(shell())
    events.opening()
    seen = typed(
        [
            *events.chunk(text("Let me look.")),
            *events.chunk(call(0, '{"a":', call_id="call_1")),
            *events.chunk(call(0, "1}")),
            *events.chunk(call(1, "{}", call_id="call_2", name="g")),
            *events.closing(Usage(3, 9)),
        ]
    )
    kinds = [e.type for e in seen]
    assert kinds == [
        "response.output_item.added",
        "response.content_part.added",
        "response.output_text.delta",
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
        "response.output_item.added",
        "response.function_call_arguments.delta",
        "response.function_call_arguments.delta",
        "response.function_call_arguments.done",
        "response.output_item.done",
        "response.output_item.added",
        "response.function_call_arguments.delta",
        "response.function_call_arguments.done",
        "response.output_item.done",
        "response.completed",
    ]
    done = [e for e in seen if e.type == "response.function_call_arguments.done"]
    assert [(d.arguments, d.output_index) for d in done] == [('{"a":1}', 1), ("{}", 2)]
    message, first, second = seen[-1].response.output
    assert message.type == "message" and first.call_id == "call_1" and second.name == "g"


def test_a_failure_mid_stream_is_error_then_response_failed() -> None:
    events = ResponseEvents(shell())
    events.opening()
    events.chunk(text("partial"))
    error, failed = typed(events.failing("The upstream connection failed."))
    assert error.type == "error" and error.message == "The upstream connection failed."
    assert failed.type == "response.failed" and failed.response.error.code == "server_error"
    assert failed.response.output == []  # the open item is dropped
    assert events.closing(Usage(1, 1)) == []


def test_an_error_event_inside_the_upstream_stream_fails_the_response() -> None:
    events = ResponseEvents(shell())
    events.opening()
    got = typed(events.chunk({"error": {"message": "engine died", "code": 500}}))
    assert [e.type for e in got] == ["error", "response.failed"]


def test_the_translator_frames_events_and_the_meter_keeps_the_upstreams_usage() -> None:
    """The relay's path: the meter decodes the upstream's chat bytes (split anywhere), the
    translator writes the events; the usage the client sees is the one the meter read."""
    upstream = (
        b'data: {"id":"c","choices":[{"index":0,"delta":{"content":"A"}}]}\n\n'
        b'data: {"id":"c","choices":[{"index":0,"delta":{"content":"B"},'
        b'"finish_reason":"stop"}]}\n\n'
        b'data: {"id":"c","choices":[],"usage":{"prompt_tokens":7,"completion_tokens":2}}\n\n'
        b"data: [DONE]\n\n"
    )
    meter, translator = StreamMeter(), ResponsesTranslator(shell())
    out = translator.opening()
    for i in range(0, len(upstream), 7):
        out += translator.chunks(meter.feed_decoded(upstream[i : i + 7]))
    assert meter.usage == {"prompt_tokens": 7, "completion_tokens": 2} and meter.done
    out += translator.closing(Usage(7, 2))
    blocks = [b for b in out.split(b"\n\n") if b]
    events = [orjson.loads(b.split(b"\ndata: ", 1)[1]) for b in blocks]
    assert all(
        b.startswith(b"event: " + e["type"].encode()) for b, e in zip(blocks, events, strict=True)
    )
    final = typed(events)[-1].response
    assert final.output_text == "AB" and final.usage.output_tokens == 2
    assert sse_events([]) == b""
    assert b"response.failed" in ResponsesTranslator(shell()).failing(UpstreamError("cut"))


def test_a_whole_chat_answer_is_a_response_object() -> None:
    document = {
        "id": "c",
        "choices": [
            {
                "index": 0,
                "finish_reason": "tool_calls",
                "message": {
                    "role": "assistant",
                    "content": "Calling.",
                    "tool_calls": [
                        {
                            "id": "call_9",
                            "type": "function",
                            "function": {"name": "f", "arguments": "{}"},
                        }
                    ],
                },
            }
        ],
    }
    response = Response.model_validate(
        response_of_chat(shell(), document, Usage(5, 3), 1_760_000_001), strict=True
    )
    assert [item.type for item in response.output] == ["message", "function_call"]
    assert response.output_text == "Calling." and response.status == "completed"
    assert response.tools[0].name == "f" and response.store is False
    empty = Response.model_validate(response_of_chat(shell(), {}, None, 1_760_000_001), strict=True)
    # No usage reported: zeros (OpenAI's schema has no null there)
    assert empty.output == [] and empty.usage is not None and empty.usage.total_tokens == 0
