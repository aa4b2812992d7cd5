"""What a request really used: the upstream's ``usage`` when it came, counted when it did not.

The upstream's usage is the truth. For a stream, the gateway asks for it on the client's behalf
(``stream_options.include_usage``) and strips the usage chunk again unless the client asked too.
A stream cut short (client gone, upstream failure, timeout) never gets its usage chunk: it is
accounted as the counted prompt plus the output delivered so far, counted with the model's
tokenizer, and marked partial. A failure before any output is refunded (nothing used).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from gateway.accounting.tokens import TokenCounter
from gateway.proxy.sse import StreamMeter


@dataclass(frozen=True, slots=True)
class Usage:
    input_tokens: int
    output_tokens: int
    cached_tokens: int
    partial: bool

    @property
    def total(self) -> int:
        return self.input_tokens + self.output_tokens


NOTHING = Usage(0, 0, 0, partial=False)


def client_wants_usage(payload: Mapping[str, Any]) -> bool:
    options = payload.get("stream_options")
    return isinstance(options, dict) and options.get("include_usage") is True


def usage_requested(payload: Mapping[str, Any]) -> dict[str, Any]:
    """The request body for the upstream, asking for the usage chunk at the end of the stream."""
    options = payload.get("stream_options")
    merged = (
        {**options, "include_usage": True} if isinstance(options, dict) else {"include_usage": True}
    )
    return {**payload, "stream_options": merged}


def measured_usage(
    meter: StreamMeter | None, prompt_tokens: Callable[[], int], counter: TokenCounter | None
) -> Usage:
    """The usage to settle and record for one finished (or abandoned) request."""
    reported = None if meter is None else meter.usage
    if reported is not None:
        return _from_upstream(reported)
    if meter is None or meter.content_events == 0:
        return Usage(0, 0, 0, partial=meter is not None and not meter.done)
    text = "".join(meter.output_parts)
    output = counter.count_text(text) if counter is not None and text else meter.content_events
    return Usage(prompt_tokens(), output, 0, partial=True)


def _from_upstream(usage: Mapping[str, Any]) -> Usage:
    details = usage.get("prompt_tokens_details")
    cached = details.get("cached_tokens") if isinstance(details, dict) else None
    return Usage(
        _int(usage.get("prompt_tokens")),
        _int(usage.get("completion_tokens")),
        _int(cached),
        partial=False,
    )


def _int(value: object) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0
