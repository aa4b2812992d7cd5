"""A served outcome for routing's unit tests, built from values (no pipeline)."""

from __future__ import annotations

from gateway.wire.outcome import Arrival, Delivered, Ending, Outcome, RouteFacts
from gateway.wire.request import Operation
from gateway.wire.usage import Usage


def served_outcome(route: RouteFacts, ttft: float, tokens: int = 5) -> Outcome:
    """A complete stream: its first token ``ttft`` seconds in, then one token each 10 ms."""
    delivered = Delivered(
        status=200,
        upstream_status=200,
        first_byte_at=ttft,
        first_token_at=ttft,
        last_token_at=ttft + 0.01 * (tokens - 1),
        content_events=tokens,
    )
    return Outcome(
        arrival=Arrival("gw-1", None, 0.0, 0.0),
        method="POST",
        path="/v1/chat/completions",
        operation=Operation.CHAT,
        model="m",
        stream=True,
        tenant_id=None,
        key_id=None,
        route=route,
        delivered=delivered,
        ending=Ending.COMPLETE,
        admitted=True,
        reached_upstream=True,
        usage=Usage(100, tokens),
        prompt_tokens=100,
        finished=1.0,
    )
