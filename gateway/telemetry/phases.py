"""Prefill and decode, as far as the gateway can see them, derived from the stream meter.

Streaming: prefill runs from the moment the request is sent upstream until the first output token
arrives; decode from the first token until the last. Both are measured at the gateway, so they
include the network and the upstream's queueing, which is what a client feels.

Non-streaming: the upstream answers once, after both phases; the gateway cannot separate them, so
it reports one whole-response interval and a lower bound on the token rate, and says so.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from gateway.proxy.sse import StreamMeter

Measured = Literal["stream", "whole_response"]


@dataclass(frozen=True, slots=True)
class Phases:
    """Times are ``time.perf_counter()`` readings, the meter's clock."""

    measured: Measured
    sent_at: float
    first_token_at: float | None
    last_token_at: float | None
    ended_at: float
    input_tokens: int | None
    output_tokens: int | None
    usage_from_upstream: bool
    content_chunks: int

    @property
    def split(self) -> bool:
        """True when prefill and decode were told apart (a stream that produced a token)."""
        return self.first_token_at is not None

    @property
    def decode_seconds(self) -> float | None:
        if self.first_token_at is None or self.last_token_at is None:
            return None
        return self.last_token_at - self.first_token_at

    @property
    def time_per_output_token(self) -> float | None:
        """Seconds between tokens after the first: the decode interval over the tokens it made."""
        decode = self.decode_seconds
        if decode is None or decode <= 0 or self.output_tokens is None or self.output_tokens < 2:
            return None
        return decode / (self.output_tokens - 1)

    @property
    def tokens_per_second(self) -> float | None:
        per_token = self.time_per_output_token
        return None if per_token is None else 1.0 / per_token

    @property
    def tokens_per_second_lower_bound(self) -> float | None:
        """Output tokens over the whole exchange, prefill included: decode was at least as fast."""
        elapsed = self.ended_at - self.sent_at
        if self.output_tokens is None or self.output_tokens < 1 or elapsed <= 0:
            return None
        return self.output_tokens / elapsed


def phases_of(meter: StreamMeter, *, streamed: bool, sent_at: float, ended_at: float) -> Phases:
    usage = meter.usage or {}
    input_tokens = _count(usage.get("prompt_tokens"))
    output_tokens = _count(usage.get("completion_tokens"))
    from_upstream = output_tokens is not None
    if output_tokens is None and streamed:
        output_tokens = meter.content_events  # one token per content event, as vLLM streams
    return Phases(
        measured="stream" if streamed else "whole_response",
        sent_at=sent_at,
        first_token_at=meter.first_token_at if streamed else None,
        last_token_at=meter.last_token_at if streamed else None,
        ended_at=ended_at,
        input_tokens=input_tokens,
        output_tokens=output_tokens,
        usage_from_upstream=from_upstream,
        content_chunks=meter.content_events,
    )


def _count(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None
