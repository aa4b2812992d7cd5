"""Real StreamMeters fed with SSE bytes as vLLM sends them, on a clock the test steps."""

from __future__ import annotations

import orjson

from gateway.proxy.sse import StreamMeter


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
