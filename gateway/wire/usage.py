"""What a request used, and the one rule that decides it (the billing rules of the README).

- The upstream's ``usage`` is the truth when it came. For a stream the gateway asks for it on the
  client's behalf (``stream_options.include_usage``) and strips it again unless the client asked.
- A request that reached the upstream and got no usage back (a stream cut by the client, the
  upstream failing mid-stream, an answer without a ``usage`` block) is charged its counted prompt,
  plus the output delivered, counted with the model's tokenizer: ``source=counted``. It is
  ``partial`` when the answer was not delivered whole.
- A request that never reached the upstream (refused, no healthy replica, a connect failure, an
  upstream error before the answer) uses nothing: ``source=none``.

"Reached" means the upstream accepted the request (it answered 2xx), or the client left after
the request had been sent, when prefill may well have run: leaving early never makes it free.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from enum import StrEnum
from typing import Any

from gateway.values import value


class UsageSource(StrEnum):
    UPSTREAM = "upstream"
    """Reported by the upstream (vLLM's ``usage``)."""
    COUNTED = "counted"
    """Counted by the gateway: the prompt it counted plus the output it delivered."""
    NONE = "none"
    """Nothing was used: the request never reached the upstream."""


@value
class Usage:
    input_tokens: int
    output_tokens: int
    cached_tokens: int = 0
    source: UsageSource = UsageSource.UPSTREAM
    partial: bool = False
    """The answer was not delivered whole (counted from what was)."""

    @property
    def total(self) -> int:
        return self.input_tokens + self.output_tokens


NOTHING = Usage(0, 0, 0, UsageSource.NONE)


def usage_from_upstream(usage: Mapping[str, Any]) -> Usage:
    """The upstream's ``usage`` block: chat and completions name its fields ``prompt_tokens``
    and ``completion_tokens``, the Responses API (a pool serving it natively) ``input_tokens``
    and ``output_tokens``."""
    if "input_tokens" in usage and "prompt_tokens" not in usage:
        details = usage.get("input_tokens_details")
        prompt, completion = usage.get("input_tokens"), usage.get("output_tokens")
    else:
        details = usage.get("prompt_tokens_details")
        prompt, completion = usage.get("prompt_tokens"), usage.get("completion_tokens")
    cached = details.get("cached_tokens") if isinstance(details, dict) else None
    return Usage(_int(prompt), _int(completion), _int(cached), UsageSource.UPSTREAM)


def settle_usage(
    *,
    reported: Usage | None,
    reached: bool,
    complete: bool,
    prompt_tokens: Callable[[], int],
    output_text: str,
    content_events: int,
    count_text: Callable[[str], int] | None,
) -> Usage:
    """The usage to settle and record for one admitted request (see the module docstring)."""
    if reported is not None:
        return reported
    if not reached:
        return NOTHING
    # Without text to count (tool calls only, or no tokenizer), one token per content event,
    # as vLLM streams them.
    counted = output_text and count_text is not None
    output = count_text(output_text) if counted and count_text else content_events
    return Usage(prompt_tokens(), output, 0, UsageSource.COUNTED, partial=not complete)


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


def _int(value: object) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0
