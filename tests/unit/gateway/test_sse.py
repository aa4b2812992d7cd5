import itertools

import orjson
import pytest

from gateway.wire.meter import MAX_EVENT_BYTES, OversizedEvent, StreamMeter


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


def vllm_delta(text: str, finish: str | None = None) -> bytes:
    """A token delta as vLLM writes it: compact JSON, ``finish_reason`` null until the end."""
    choice = {"index": 0, "delta": {"content": text}, "logprobs": None, "finish_reason": finish}
    return event({"id": "c1", "object": "chat.completion.chunk", "model": "m", "choices": [choice]})


WORDS = [f" w{i}" for i in range(20)]
LONG = [ROLE, *(vllm_delta(w) for w in WORDS), vllm_delta("", "length")]


def test_token_deltas_after_the_first_are_counted_undecoded_when_usage_comes() -> None:
    ticks = itertools.count(1.0)
    meter = StreamMeter(strip_usage=True, clock=lambda: next(ticks))
    forwarded = b"".join(meter.feed(e) for e in [*LONG, USAGE, b"data: [DONE]\n\n"])
    assert forwarded == b"".join(LONG) + b"data: [DONE]\n\n"  # the usage event stripped
    delivered = meter.delivered(status=200, upstream_status=200, first_byte_at=0, error_code=None)
    assert delivered.content_events == 20
    assert (delivered.first_token_at, delivered.last_token_at) == (1.0, 20.0)
    assert delivered.finish_reasons == ("length",)  # a finishing event is always decoded
    assert delivered.upstream_usage is not None and delivered.output_text == ""
    # Read directly, the counts and the text are decoded, exact.
    assert meter.content_events == 20 and "".join(meter.output_parts) == "".join(WORDS)


def test_a_stream_cut_before_its_usage_bills_the_whole_delivered_text() -> None:
    meter = StreamMeter(strip_usage=True)
    for e in LONG[:11]:  # the role, then 10 tokens; then the upstream connection broke
        meter.feed(e)
    delivered = meter.delivered(status=200, upstream_status=200, first_byte_at=0, error_code=None)
    assert delivered.upstream_usage is None
    assert delivered.output_text == "".join(WORDS[:10]) and delivered.content_events == 10


def test_deltas_in_another_layout_are_decoded_as_before() -> None:
    spaced = [e.replace(b'"finish_reason":null', b'"finish_reason": null') for e in LONG]
    meter = StreamMeter()
    for e in spaced:
        meter.feed(e)
    assert meter._deferred == []  # nothing matched the compact layout: all decoded
    assert "".join(meter.output_parts) == "".join(WORDS)


def test_an_empty_delta_after_the_first_token_counts_until_decoded() -> None:
    """The one approximation: undecoded, an empty delta counts as a content event."""
    meter = StreamMeter()
    for e in [ROLE, vllm_delta("a"), vllm_delta(""), vllm_delta("b"), USAGE]:
        meter.feed(e)
    delivered = meter.delivered(status=200, upstream_status=200, first_byte_at=0, error_code=None)
    assert delivered.content_events == 3
    assert meter.content_events == 2  # decoded: exact


def test_an_event_where_one_choice_finishes_is_always_decoded() -> None:
    both = {
        "id": "c1",
        "choices": [
            {"index": 0, "delta": {"content": "x"}, "finish_reason": None},
            {"index": 1, "delta": {}, "finish_reason": "stop"},
        ],
    }
    meter = StreamMeter()
    for e in [ROLE, vllm_delta("a"), event(both), USAGE]:
        meter.feed(e)
    delivered = meter.delivered(status=200, upstream_status=200, first_byte_at=0, error_code=None)
    assert delivered.finish_reasons == ("stop",)


def test_a_model_writing_the_markers_in_its_text_does_not_change_the_metering() -> None:
    """Inside a JSON string the quotes are escaped, so the text cannot pass for the markers."""
    sly = '"finish_reason":"stop" and "usage"'
    meter = StreamMeter()
    for e in [ROLE, vllm_delta("a"), vllm_delta(sly), USAGE]:
        meter.feed(e)
    assert meter._deferred == [vllm_delta(sly)]  # still a plain token delta, undecoded
    assert "".join(meter.output_parts) == "a" + sly


def test_a_burst_of_deltas_in_one_read_is_kept_as_one_run() -> None:
    """A busy gateway reads many events at once: the deltas after the first token are checked
    and kept together; finishing and usage events around them are still decoded."""
    stream = b"".join([*LONG, USAGE, b"data: [DONE]\n\n"])
    meter = StreamMeter(strip_usage=True)
    forwarded = meter.feed(stream) + meter.flush()
    assert forwarded == b"".join(LONG) + b"data: [DONE]\n\n"
    assert meter._deferred == [b"".join(LONG[2:-1])]  # 19 deltas after the first token
    delivered = meter.delivered(status=200, upstream_status=200, first_byte_at=0, error_code=None)
    assert delivered.content_events == 20 and delivered.finish_reasons == ("length",)
    assert delivered.upstream_usage is not None and meter.done
    assert meter.content_events == 20 and "".join(meter.output_parts) == "".join(WORDS)


def test_any_chunking_meters_the_same() -> None:
    stream = b"".join([*LONG, USAGE, b"data: [DONE]\n\n"])
    for cut in range(1, len(stream), 5):
        for second in (cut + 1, (cut + len(stream)) // 2):
            meter = StreamMeter(strip_usage=True)
            parts = (stream[:cut], stream[cut:second], stream[second:])
            forwarded = b"".join(meter.feed(p) for p in parts) + meter.flush()
            assert forwarded == b"".join(LONG) + b"data: [DONE]\n\n"
            assert meter.usage is not None and meter.finish_reasons == ["length"]
            assert meter.content_events == 20 and "".join(meter.output_parts) == "".join(WORDS)


def test_a_run_holding_anything_but_plain_deltas_is_decoded_event_by_event() -> None:
    ping = b": keep-alive\n\n"
    stream = b"".join([ROLE, vllm_delta("a"), vllm_delta("b"), ping, vllm_delta("c"), USAGE])
    meter = StreamMeter()
    assert meter.feed(stream) == stream
    assert meter._deferred == []  # the comment failed the run's counts
    assert meter.content_events == 3 and "".join(meter.output_parts) == "abc"


def test_an_event_a_read_meters_as_the_whole_stream_in_one_read() -> None:
    """A paced stream (one event a read) takes the single-delta path: the same forwarded bytes,
    counts, text, times and usage as the stream read at once."""
    events = [*LONG, USAGE, b"data: [DONE]\n\n"]
    ticks = itertools.count(1.0)
    paced = StreamMeter(strip_usage=True, clock=lambda: next(ticks))
    forwarded = b"".join(paced.feed(e) for e in events) + paced.flush()
    whole = StreamMeter(strip_usage=True)
    assert forwarded == whole.feed(b"".join(events)) + whole.flush()
    assert paced._deferred == LONG[2:-1]  # each delta after the first token, undecoded
    assert (paced.first_token_at, paced.last_token_at) == (1.0, 20.0)
    delivered = paced.delivered(status=200, upstream_status=200, first_byte_at=0, error_code=None)
    assert delivered.content_events == 20 and delivered.finish_reasons == ("length",)
    assert paced.usage == whole.usage and paced.done
    assert "".join(paced.output_parts) == "".join(whole.output_parts) == "".join(WORDS)


def test_a_single_event_with_usage_or_two_reasons_is_decoded_even_alone() -> None:
    """Continuous usage stats (a usage block in every delta) and a second choice finishing are
    never kept undecoded, one event a read included; a cut stream bills every delivered word."""
    with_usage = event(
        {
            "id": "c1",
            "choices": [{"index": 0, "delta": {"content": "u"}, "finish_reason": None}],
            "usage": {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5},
        }
    )
    both = event(
        {
            "id": "c1",
            "choices": [
                {"index": 0, "delta": {"content": "x"}, "finish_reason": None},
                {"index": 1, "delta": {}, "finish_reason": "stop"},
            ],
        }
    )
    meter = StreamMeter()
    for e in [ROLE, vllm_delta("a"), with_usage, both, vllm_delta("b")]:
        meter.feed(e)
    assert meter._deferred == [vllm_delta("b")]
    assert meter.usage is not None and meter.finish_reasons == ["stop"]
    cut = StreamMeter()
    for e in [ROLE, vllm_delta("a"), vllm_delta("b"), vllm_delta("c")]:
        cut.feed(e)
    delivered = cut.delivered(status=200, upstream_status=200, first_byte_at=0, error_code=None)
    assert delivered.output_text == "abc" and delivered.content_events == 3


def test_crlf_framing_meters_as_lf_wherever_chunks_split() -> None:
    crlf = STREAM.replace(b"\n", b"\r\n")
    for cut in range(1, len(crlf)):
        meter = StreamMeter(strip_usage=True)
        forwarded = meter.feed(crlf[:cut]) + meter.feed(crlf[cut:]) + meter.flush()
        assert forwarded == STREAM.replace(USAGE, b"")  # forwarded whole, framed by LF
        assert meter.content_events == 2 and meter.finish_reasons == ["length"]
        assert meter.usage is not None and meter.done


def test_an_unended_event_past_the_bound_breaks_the_stream() -> None:
    # An upstream that never ends its event (no blank line): the meter holds at most
    # MAX_EVENT_BYTES of it, then raises, whatever the pieces' size.
    for piece in (b"x" * 4096, b"data: " + b"x" * 1000 + b"\n"):
        for strip in (False, True):
            meter = StreamMeter(strip_usage=strip)
            meter.feed(ROLE + TOKENS[0])
            fed = 0
            with pytest.raises(OversizedEvent) as caught:
                while fed <= 2 * MAX_EVENT_BYTES:
                    meter.feed(piece)
                    fed += len(piece)
            assert fed <= MAX_EVENT_BYTES < fed + len(piece)  # raised by the piece past it
            assert caught.value.code == "upstream_event_too_large"
            assert meter.flush() == b""  # nothing of the oversized event is forwarded
            assert meter.content_events == 1


def test_a_long_event_under_the_bound_is_metered_whole() -> None:
    text = "y" * (MAX_EVENT_BYTES // 2)
    long = event({"id": "c1", "choices": [{"index": 0, "delta": {"content": text}}]})
    for strip in (False, True):
        meter = StreamMeter(strip_usage=strip)
        pieces = [long[i : i + 1000] for i in range(0, len(long), 1000)]
        forwarded = b"".join(meter.feed(p) for p in [ROLE, *pieces]) + meter.flush()
        assert forwarded == ROLE + long
        assert meter.content_events == 1 and meter.output_parts == [text]


def test_decoded_events_accept_crlf_and_the_bound() -> None:
    crlf = STREAM.replace(b"\n", b"\r\n")
    meter = StreamMeter()
    cut = crlf.index(b"\r\n\r\n") + 1  # between the CR and the LF ending the first line
    decoded = [*meter.feed_decoded(crlf[:cut]), *meter.feed_decoded(crlf[cut:])]
    assert len(decoded) == 5 and meter.done and meter.usage is not None
    with pytest.raises(OversizedEvent):
        for _ in range(MAX_EVENT_BYTES // 4096 + 1):
            meter.feed_decoded(b"y" * 4096)


def test_an_event_a_read_with_crlf_framing_is_forwarded_as_lf_when_stripping() -> None:
    """One event a read in CRLF framing, or ending CR LF LF, is not the single-delta path's: it
    is framed like any other (forwarded with LF line ends when stripping)."""
    for crlf in (vllm_delta("b").replace(b"\n", b"\r\n"), vllm_delta("b")[:-2] + b"\r\n\n"):
        meter = StreamMeter(strip_usage=True)
        forwarded = b"".join(meter.feed(e) for e in [ROLE, vllm_delta("a"), crlf])
        assert forwarded == ROLE + vllm_delta("a") + vllm_delta("b")
        assert "".join(meter.output_parts) == "ab"
