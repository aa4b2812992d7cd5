"""Prefill and decode, as far as the gateway can see them, derived from the request's outcome.

Streaming: prefill runs from the moment the request is sent upstream until the first output token
arrives; decode from the first token until the last. Both are measured at the gateway, so they
include the network and the upstream's queueing, which is what a client feels.

Non-streaming: the upstream answers once, after both phases; the gateway cannot separate them, so
it reports one whole-response interval and a lower bound on the token rate, and says so.
"""

from __future__ import annotations

from typing import Literal

from gateway.values import value
from gateway.wire.outcome import Outcome
from gateway.wire.usage import UsageSource

Measured = Literal["stream", "whole_response"]


@value
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
    tokens_per_second: float | None
    """Decode speed, as the outcome computes it (one place for every consumer)."""

    @property
    def split(self) -> bool:
        """True when prefill and decode were told apart (a stream that produced a token)."""
        return self.first_token_at is not None

    @property
    def tokens_per_second_lower_bound(self) -> float | None:
        """Output tokens over the whole exchange, prefill included: decode was at least as fast."""
        elapsed = self.ended_at - self.sent_at
        if self.output_tokens is None or self.output_tokens < 1 or elapsed <= 0:
            return None
        return self.output_tokens / elapsed


def phases_of(outcome: Outcome, *, sent_at: float) -> Phases:
    """The phases of the attempt that answered, from the request's one outcome."""
    delivered, usage = outcome.delivered, outcome.usage
    streamed = bool(outcome.stream)
    counted = usage.source is not UsageSource.NONE
    return Phases(
        measured="stream" if streamed else "whole_response",
        sent_at=sent_at,
        first_token_at=delivered.first_token_at if streamed else None,
        last_token_at=delivered.last_token_at if streamed else None,
        ended_at=outcome.finished,
        input_tokens=usage.input_tokens if counted else None,
        output_tokens=usage.output_tokens if counted else None,
        usage_from_upstream=usage.source is UsageSource.UPSTREAM,
        content_chunks=delivered.content_events,
        tokens_per_second=outcome.tokens_per_second,
    )
