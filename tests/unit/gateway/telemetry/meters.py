"""Real StreamMeters fed with SSE bytes as vLLM sends them, on a clock the test steps."""

from __future__ import annotations

import orjson

from gateway.wire.meter import StreamMeter
from gateway.wire.outcome import Arrival, Ending, Outcome, RouteFacts
from gateway.wire.request import Operation
from gateway.wire.usage import settle_usage


class StepClock:
    def __init__(self, now: float = 100.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def event(message: dict[str, object]) -> bytes:
    return b"data: " + orjson.dumps(message) + b"\n\n"


def content(text: str, finish: str | None = None) -> bytes:
    choice = {"index": 0, "delta": {"content": text}, "finish_reason": finish}
    return event({"id": "chatcmpl-1", "model": "up-model", "choices": [choice]})


def usage(prompt: int, completion: int) -> bytes:
    body = {"prompt_tokens": prompt, "completion_tokens": completion}
    return event({"id": "chatcmpl-1", "model": "up-model", "choices": [], "usage": body})


def streamed_meter(
    clock: StepClock, first_at: float, gap: float, tokens: int, with_usage: bool = True
) -> StreamMeter:
    """``tokens`` content events, the first at ``first_at`` and then every ``gap`` seconds."""
    meter = StreamMeter(clock=clock)
    for i in range(tokens):
        clock.now = first_at + i * gap
        meter.feed(content(f"t{i}", "stop" if i == tokens - 1 else None))
    if with_usage:
        meter.feed(usage(prompt=300, completion=tokens))
    meter.feed(b"data: [DONE]\n\n")
    return meter


def outcome_of(
    meter: StreamMeter,
    *,
    streamed: bool,
    started: float,
    finished: float,
    first_byte_at: float | None = None,
    ending: Ending = Ending.COMPLETE,
) -> Outcome:
    """The outcome of a request whose relay metered ``meter``, settled by the pipeline's rule."""
    delivered = meter.delivered(
        status=200, upstream_status=200, first_byte_at=first_byte_at, error_code=None
    )
    usage = settle_usage(
        reported=delivered.upstream_usage,
        reached=True,
        complete=ending is Ending.COMPLETE,
        prompt_tokens=lambda: 42,
        output_text="",
        content_events=delivered.content_events,
        count_text=None,
    )
    return Outcome(
        arrival=Arrival("gw-1", None, started, 0.0),
        method="POST",
        path="/v1/chat/completions",
        operation=Operation.CHAT,
        model="m",
        stream=streamed,
        tenant_id=None,
        key_id=None,
        route=RouteFacts("default", "pd", "http://up", "single_pool"),
        delivered=delivered,
        ending=ending,
        admitted=True,
        reached_upstream=True,
        usage=usage,
        prompt_tokens=42,
        finished=finished,
    )
