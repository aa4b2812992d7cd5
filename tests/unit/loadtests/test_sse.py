"""SSE timing: token events, usage, [DONE], errors, and pieces split anywhere."""

from __future__ import annotations

import orjson
import pytest

from loadtests.pdload.sse import StreamProtocolError, StreamTimer, timing


def _event(chunk: dict[str, object]) -> bytes:
    return b"data: " + orjson.dumps(chunk) + b"\n\n"


def _chat(text: str) -> bytes:
    return _event({"choices": [{"index": 0, "delta": {"content": text}}]})


ROLE = _event({"choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}]})
USAGE = _event({"choices": [], "usage": {"prompt_tokens": 7, "completion_tokens": 3}})


def test_tokens_timed_at_arrival_role_and_usage_are_not_tokens() -> None:
    timer = StreamTimer()
    timer.feed(ROLE, 0.05)
    timer.feed(_chat("a"), 0.10)
    timer.feed(_chat("b"), 0.12)
    timer.feed(_chat("c") + USAGE + b"data: [DONE]\n\n", 0.15)
    assert timer.token_times == [0.10, 0.12, 0.15]
    assert timer.usage == {"prompt_tokens": 7, "completion_tokens": 3}
    assert timer.done and timer.error is None
    assert timer.first_byte_at == 0.05


def test_completions_text_counts_and_crlf_and_comments() -> None:
    timer = StreamTimer()
    timer.feed(b": keep-alive\r\n\r\n", 0.0)
    timer.feed(b'data: {"choices":[{"text":"x"}]}\r\n\r\n', 0.2)
    assert timer.token_times == [0.2]


def test_an_event_split_across_pieces_is_timed_when_it_completes() -> None:
    whole = _chat("hello")
    timer = StreamTimer()
    timer.feed(whole[:9], 1.0)
    assert timer.token_times == []
    timer.feed(whole[9:], 1.5)
    assert timer.token_times == [1.5]


def test_error_event_is_recorded() -> None:
    timer = StreamTimer()
    timer.feed(_event({"error": {"message": "upstream went away", "type": "server_error"}}), 1.0)
    assert timer.error == "upstream went away"


def test_bad_json_and_oversized_events_raise() -> None:
    with pytest.raises(StreamProtocolError):
        StreamTimer().feed(b"data: {nope\n\n", 0.0)
    with pytest.raises(StreamProtocolError):
        StreamTimer().feed(b"data: " + b"x" * (1 << 20) + b"x", 0.0)


def test_timing_from_token_times() -> None:
    t = timing(start=1.0, end=1.5, token_times=[1.1, 1.12, 1.15, 1.2], output_tokens=None)
    assert t.ttft == pytest.approx(0.1)
    assert t.itls == pytest.approx((0.02, 0.03, 0.05))
    assert t.tpot == pytest.approx(0.1 / 3)
    assert t.e2e == pytest.approx(0.5)


def test_tpot_uses_the_usage_count_when_chunks_carry_several_tokens() -> None:
    t = timing(start=0.0, end=1.0, token_times=[0.1, 0.5], output_tokens=5)
    assert t.tpot == pytest.approx(0.1)


def test_no_token_means_no_ttft() -> None:
    t = timing(start=0.0, end=0.3, token_times=[], output_tokens=0)
    assert t.ttft is None and t.tpot is None and t.itls == ()
