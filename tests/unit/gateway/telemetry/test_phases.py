"""Prefill and decode derived from a stream meter; what non-streaming answers can honestly give."""

from __future__ import annotations

import pytest

from gateway.telemetry.attempt import prompt_length_band
from gateway.telemetry.phases import phases_of
from gateway.wire.meter import StreamMeter
from tests.unit.gateway.telemetry.meters import StepClock, outcome_of, streamed_meter


def test_stream_splits_at_the_first_token() -> None:
    meter = streamed_meter(StepClock(), first_at=10.5, gap=0.02, tokens=11)
    outcome = outcome_of(meter, streamed=True, started=9.9, finished=10.75)
    phases = phases_of(outcome, sent_at=10.0)
    assert phases.split and phases.measured == "stream"
    assert phases.first_token_at == 10.5
    assert (phases.input_tokens, phases.output_tokens) == (300, 11)
    assert phases.usage_from_upstream
    assert outcome.time_to_first_token == pytest.approx(0.6)
    assert outcome.time_per_output_token == pytest.approx(0.02)
    assert phases.tokens_per_second == outcome.tokens_per_second == pytest.approx(50.0)


def test_stream_without_usage_counts_content_events_and_says_so() -> None:
    meter = streamed_meter(StepClock(), first_at=1.0, gap=0.1, tokens=5, with_usage=False)
    outcome = outcome_of(meter, streamed=True, started=0.4, finished=1.5)
    phases = phases_of(outcome, sent_at=0.5)
    assert phases.output_tokens == 5
    assert not phases.usage_from_upstream
    assert phases.input_tokens == 42  # the counted prompt: the same number the ledger bills


def test_one_token_has_no_decode_rate() -> None:
    meter = streamed_meter(StepClock(), first_at=1.0, gap=0.1, tokens=1)
    outcome = outcome_of(meter, streamed=True, started=0.4, finished=1.1)
    phases = phases_of(outcome, sent_at=0.5)
    assert outcome.time_per_output_token is None
    assert phases.tokens_per_second is None


def test_whole_response_is_not_split_and_gives_a_lower_bound_only() -> None:
    meter = StreamMeter()
    meter.observe_document(
        b'{"id":"c","model":"m","choices":[{"finish_reason":"length"}],'
        b'"usage":{"prompt_tokens":7,"completion_tokens":20}}'
    )
    outcome = outcome_of(meter, streamed=False, started=2.9, finished=5.0, first_byte_at=5.0)
    phases = phases_of(outcome, sent_at=3.0)
    assert not phases.split and phases.measured == "whole_response"
    assert phases.tokens_per_second is None
    assert outcome.time_to_first_token == pytest.approx(2.1)  # the first byte, for a whole answer
    assert phases.tokens_per_second_lower_bound == pytest.approx(10.0)
    assert (phases.input_tokens, phases.output_tokens) == (7, 20)


@pytest.mark.parametrize(
    ("tokens", "band"),
    [
        (None, "unknown"),
        (0, "0-256"),
        (256, "0-256"),
        (257, "256-1k"),
        (4096, "1k-4k"),
        (16384, "4k-16k"),
        (16385, "16k+"),
    ],
)
def test_prompt_length_bands_are_bounded(tokens: int | None, band: str) -> None:
    assert prompt_length_band(tokens) == band
