"""Timing of one server-sent-event stream of an OpenAI completion, fed bytes as they arrive.

The parser is incremental (a stream arrives in arbitrary pieces) and pure: the caller passes the
arrival time of each piece, so tests feed it synthetic times. A *token event* is a chunk whose
first choice carries non-empty text (chat ``delta.content``, completions ``text``); vLLM's role
chunk and the usage chunk are not tokens::

    timer = StreamTimer()
    timer.feed(b'data: {"choices":[{"delta":{"content":"hi"}}]}\\n\\n', now=0.25)
    timer.token_times  # [0.25]
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from typing import Any

import orjson

# A stream event larger than this is malformed for our purpose; bounding it bounds memory.
MAX_EVENT_BYTES = 1 << 20


class StreamProtocolError(Exception):
    """The bytes are not an OpenAI SSE stream (oversized event, bad JSON)."""


@dataclass(slots=True)
class StreamTimer:
    """Collects token arrival times, usage, the ``[DONE]`` marker and any error event."""

    token_times: list[float] = field(default_factory=list)
    usage: dict[str, Any] | None = None
    done: bool = False
    error: str | None = None
    first_byte_at: float | None = None
    _buffer: bytes = b""

    def feed(self, data: bytes, now: float) -> None:
        """Add ``data`` received at ``now``; every complete event in it is timed at ``now``."""
        if self.first_byte_at is None and data:
            self.first_byte_at = now
        self._buffer += data.replace(b"\r\n", b"\n")
        while True:
            end = self._buffer.find(b"\n\n")
            if end < 0:
                break
            event, self._buffer = self._buffer[:end], self._buffer[end + 2 :]
            self._event(event, now)
        if len(self._buffer) > MAX_EVENT_BYTES:
            raise StreamProtocolError(f"an SSE event exceeded {MAX_EVENT_BYTES} bytes")

    def _event(self, event: bytes, now: float) -> None:
        lines = [line[5:].lstrip() for line in event.split(b"\n") if line.startswith(b"data:")]
        if not lines:
            return  # a comment or keep-alive
        payload = b"\n".join(lines)
        if payload == b"[DONE]":
            self.done = True
            return
        try:
            chunk = orjson.loads(payload)
        except orjson.JSONDecodeError as e:
            raise StreamProtocolError(f"an SSE event is not JSON: {payload[:80]!r}") from e
        if isinstance(chunk, dict):
            self._chunk(chunk, now)

    def _chunk(self, chunk: dict[str, Any], now: float) -> None:
        if "error" in chunk:
            error = chunk["error"]
            message = error.get("message") if isinstance(error, dict) else error
            self.error = str(message)[:200]
            return
        if isinstance(chunk.get("usage"), dict):
            self.usage = chunk["usage"]
        if chunk_text(chunk):
            self.token_times.append(now)


def chunk_text(chunk: dict[str, Any]) -> str:
    """The text a chunk carries: chat ``choices[0].delta.content`` or completions ``text``."""
    choices = chunk.get("choices")
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
        return ""
    choice = choices[0]
    delta = choice.get("delta")
    if isinstance(delta, dict):
        content = delta.get("content")
        return content if isinstance(content, str) else ""
    text = choice.get("text")
    return text if isinstance(text, str) else ""


@dataclass(frozen=True, slots=True)
class Timing:
    """Per-request latencies in seconds, from the request's send time."""

    ttft: float | None
    itls: tuple[float, ...]
    tpot: float | None
    e2e: float


def timing(start: float, end: float, token_times: list[float], output_tokens: int | None) -> Timing:
    """TTFT, the gaps between token events (ITL) and time per output token after the first.

    TPOT divides the decode time by the tokens after the first; it uses the server's usage count
    when given, so a chunk carrying several tokens still counts each one.
    """
    if not token_times:
        return Timing(None, (), None, end - start)
    ttft = token_times[0] - start
    itls = tuple(b - a for a, b in itertools.pairwise(token_times))
    tokens = output_tokens if output_tokens is not None else len(token_times)
    tpot = (token_times[-1] - token_times[0]) / (tokens - 1) if tokens > 1 else None
    return Timing(ttft, itls, tpot, end - start)
