"""The meter on a pool that serves the Responses API natively: its events and usage names."""

from __future__ import annotations

import orjson

from gateway.wire.meter import StreamMeter
from gateway.wire.usage import Usage, usage_from_upstream


def event(payload: dict[str, object]) -> bytes:
    return b"event: x\ndata: " + orjson.dumps(payload) + b"\n\n"


def test_native_events_are_metered() -> None:
    ticks = iter(range(10))
    meter = StreamMeter(clock=lambda: float(next(ticks)))
    usage = {"input_tokens": 9, "output_tokens": 2, "input_tokens_details": {"cached_tokens": 4}}
    events = [
        event({"type": "response.created", "response": {"id": "resp_1", "model": "m"}}),
        event({"type": "response.output_text.delta", "delta": "A"}),
        event({"type": "response.output_text.delta", "delta": "B"}),
        event({"type": "response.completed", "response": {"status": "completed", "usage": usage}}),
    ]
    assert [meter.feed(e) for e in events] == events  # forwarded untouched
    delivered = meter.delivered(status=200, upstream_status=200, first_byte_at=0.0, error_code=None)
    assert delivered.upstream_usage == Usage(9, 2, 4)
    assert delivered.output_text == "AB" and delivered.content_events == 2
    assert delivered.response_id == "resp_1" and delivered.finish_reasons == ("completed",)
    assert (delivered.first_token_at, delivered.last_token_at) == (0.0, 1.0)


def test_chat_usage_names_win_when_both_are_there() -> None:
    assert usage_from_upstream({"prompt_tokens": 3, "completion_tokens": 1}) == Usage(3, 1)
    assert usage_from_upstream({"input_tokens": 3, "output_tokens": 1}) == Usage(3, 1)
