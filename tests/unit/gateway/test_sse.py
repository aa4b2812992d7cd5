import itertools

import orjson

from gateway.wire.meter import StreamMeter


def event(obj: object) -> bytes:
    return b"data: " + orjson.dumps(obj) + b"\n\n"


ROLE = event(
    {
        "id": "c1",
        "model": "m",
        "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}],
    }
)
TOKENS = [
    event({"id": "c1", "model": "m", "choices": [{"index": 0, "delta": {"content": w}}]})
    for w in ("a", "b")
]
LAST = event({"id": "c1", "choices": [{"index": 0, "delta": {}, "finish_reason": "length"}]})
USAGE = event(
    {
        "id": "c1",
        "choices": [],
        "usage": {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5},
    }
)
STREAM = ROLE + b"".join(TOKENS) + LAST + USAGE + b"data: [DONE]\n\n"


def test_meters_tokens_usage_and_reasons() -> None:
    ticks = itertools.count(1.0)
    meter = StreamMeter(clock=lambda: next(ticks))
    events = [ROLE, *TOKENS, LAST, USAGE, b"data: [DONE]\n\n"]
    assert b"".join(meter.feed(e) for e in events) == STREAM
    assert meter.content_events == 2
    # The clock is read when a chunk carried output: the two token events, not the others.
    assert (meter.first_token_at, meter.last_token_at) == (1.0, 2.0)
    assert meter.usage == {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5}
    assert meter.finish_reasons == ["length"]
    assert (meter.response_id, meter.response_model, meter.done) == ("c1", "m", True)


def test_events_arriving_together_share_one_arrival_time() -> None:
    ticks = itertools.count(1.0)
    meter = StreamMeter(clock=lambda: next(ticks))
    meter.feed(STREAM)
    assert meter.content_events == 2
    assert (meter.first_token_at, meter.last_token_at) == (1.0, 1.0)


def test_events_split_across_chunks_at_every_byte() -> None:
    for cut in range(1, len(STREAM)):
        meter = StreamMeter()
        forwarded = meter.feed(STREAM[:cut]) + meter.feed(STREAM[cut:]) + meter.flush()
        assert forwarded == STREAM
        assert meter.content_events == 2 and meter.usage is not None and meter.done


def test_strip_usage_removes_only_the_usage_event_wherever_chunks_split() -> None:
    expected = STREAM.replace(USAGE, b"")
    for cut in range(1, len(STREAM), 7):
        meter = StreamMeter(strip_usage=True)
        forwarded = meter.feed(STREAM[:cut]) + meter.feed(STREAM[cut:]) + meter.flush()
        assert forwarded == expected
        assert meter.usage is not None


def test_observe_document_for_non_streaming_answers() -> None:
    meter = StreamMeter()
    meter.observe_document(
        orjson.dumps(
            {
                "id": "x",
                "model": "m",
                "choices": [{"finish_reason": "stop"}],
                "usage": {"total_tokens": 4},
            }
        )
    )
    assert (meter.response_id, meter.finish_reasons, meter.usage) == (
        "x",
        ["stop"],
        {"total_tokens": 4},
    )
    broken = StreamMeter()
    broken.observe_document(b"not json")
    assert broken.usage is None
