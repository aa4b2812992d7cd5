"""Meter an OpenAI server-sent-event stream chunk by chunk, without re-serialising it.

The relay forwards the upstream's bytes; the meter only reads them to learn when the first and last
tokens came, how many output chunks there were, the ``usage`` block and the finish reasons::

    meter = StreamMeter()
    for chunk in upstream_chunks:
        out = meter.feed(chunk)     # the bytes to forward (the chunk itself unless stripping)
    meter.usage, meter.first_token_at, meter.content_events

With ``strip_usage=True`` the usage-only event (``"choices": []`` plus ``usage``, which the gateway
asked for on the client's behalf) is removed from what is forwarded; only then are incomplete events
held back until their end arrives, so the event is never half sent.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import orjson

from gateway.wire.outcome import Delivered
from gateway.wire.usage import usage_from_upstream

_DONE = b"[DONE]"


class StreamMeter:
    __slots__ = (
        "_clock",
        "_strip_usage",
        "_tail",
        "content_events",
        "done",
        "events",
        "finish_reasons",
        "first_token_at",
        "last_token_at",
        "output_parts",
        "response_id",
        "response_model",
        "usage",
    )

    def __init__(
        self, *, strip_usage: bool = False, clock: Callable[[], float] = time.perf_counter
    ) -> None:
        self._clock = clock
        self._strip_usage = strip_usage
        self._tail = b""
        self.events = 0
        self.content_events = 0
        self.first_token_at: float | None = None
        self.last_token_at: float | None = None
        self.output_parts: list[str] = []
        """The text delivered, to count the output of a stream cut before its usage came."""
        self.usage: dict[str, Any] | None = None
        self.finish_reasons: list[str] = []
        self.response_id: str | None = None
        self.response_model: str | None = None
        self.done = False

    def feed(self, chunk: bytes) -> bytes:
        """Meter one chunk; returns the bytes to forward to the client.

        The hot loop of a stream (README, Performance): events of one chunk arrived together, so
        the clock is read once a chunk, and the usual event (one ``data: {...}`` line) takes the
        short way to ``orjson``; anything else goes through :meth:`_message_of`."""
        data = self._tail + chunk if self._tail else chunk
        *complete, self._tail = data.split(b"\n\n")
        strip = self._strip_usage
        if not complete:
            return b"" if strip else chunk
        kept: list[bytes] = []
        meter, loads = self._meter_message, orjson.loads
        produced_before = self.content_events
        for event in complete:
            message: Any
            if event[:7] == b"data: {" and b"\n" not in event:
                try:
                    message = loads(event[6:])
                except orjson.JSONDecodeError:
                    message = None
            else:
                message = self._message_of(event)
            if type(message) is dict and meter(message) and strip:
                continue  # the usage-only event the gateway asked for: not forwarded
            if strip:
                kept.append(event)
        if self.content_events != produced_before:
            self._tokens_arrived()
        if not strip:
            return chunk
        if not kept:
            return b""
        # Only whole events are forwarded in stripping mode; the tail waits for its end.
        return b"\n\n".join(kept) + b"\n\n"

    def feed_decoded(self, chunk: bytes) -> list[dict[str, Any]]:
        """Meter one chunk; returns its complete events, decoded, for a translator (the
        Responses API) that writes other bytes than the upstream's. Each event is parsed once,
        for the meter and the translator alike."""
        data = self._tail + chunk if self._tail else chunk
        *complete, self._tail = data.split(b"\n\n")
        decoded = []
        produced_before = self.content_events
        for event in complete:
            message = self._message_of(event)
            if message is not None:
                self._meter_message(message)
                decoded.append(message)
        if self.content_events != produced_before:
            self._tokens_arrived()
        return decoded

    def _tokens_arrived(self) -> None:
        """Output arrived in this chunk: the first token's time if none yet, and the last's."""
        now = self._clock()
        if self.first_token_at is None:
            self.first_token_at = now
        self.last_token_at = now

    def delivered(
        self,
        *,
        status: int,
        upstream_status: int,
        first_byte_at: float | None,
        error_code: str | None,
    ) -> Delivered:
        """What was delivered, as one value (see :class:`gateway.wire.outcome.Delivered`)."""
        return Delivered(
            status=status,
            upstream_status=upstream_status,
            first_byte_at=first_byte_at,
            first_token_at=self.first_token_at,
            last_token_at=self.last_token_at,
            content_events=self.content_events,
            upstream_usage=None if self.usage is None else usage_from_upstream(self.usage),
            output_text="".join(self.output_parts),
            finish_reasons=tuple(self.finish_reasons),
            response_id=self.response_id if isinstance(self.response_id, str) else None,
            response_model=self.response_model if isinstance(self.response_model, str) else None,
            error_code=error_code,
        )

    def flush(self) -> bytes:
        """What is left at the end of the stream (an unterminated event, in stripping mode)."""
        tail, self._tail = self._tail, b""
        return tail if self._strip_usage else b""

    def _message_of(self, event: bytes) -> dict[str, Any] | None:
        """The JSON object an event carries; None for ``[DONE]`` (noted), comments, non-objects."""
        if event.startswith(b"data: ") and b"\n" not in event:
            payload: bytes | None = event[6:].strip()
        else:
            payload = _data_of(event)
        if payload is None:
            return None
        if payload == _DONE:
            self.done = True
            return None
        try:
            message = orjson.loads(payload)
        except orjson.JSONDecodeError:
            return None
        return message if type(message) is dict else None

    def observe_document(self, body: bytes) -> None:
        """Meter a whole non-streaming answer (one JSON document) the same way."""
        try:
            document = orjson.loads(body)
        except orjson.JSONDecodeError:
            return
        if not isinstance(document, dict):
            return
        self.response_id = document.get("id")
        self.response_model = document.get("model")
        usage = document.get("usage")
        if isinstance(usage, dict):
            self.usage = usage
        for choice in document.get("choices") or ():
            if isinstance(choice, dict) and choice.get("finish_reason"):
                self.finish_reasons.append(choice["finish_reason"])

    def _meter_event(self, event: bytes) -> bool:
        """Record one event; True if it is a usage-only event."""
        message = self._message_of(event)
        return message is not None and self._meter_message(message)

    def _meter_message(self, message: dict[str, Any]) -> bool:
        """Record one decoded event; True if it is a usage-only event."""
        self.events += 1
        kind = message.get("type")
        if isinstance(kind, str) and kind.startswith("response."):
            self._meter_response_event(kind, message)
            return False
        if self.response_id is None:
            self.response_id = message.get("id")
            self.response_model = message.get("model")
        usage = message.get("usage")
        is_usage = type(usage) is dict
        if is_usage:
            self.usage = usage
        choices = message.get("choices")
        if not choices:
            return is_usage
        self._meter_choices(choices)
        return False

    def _meter_response_event(self, kind: str, message: dict[str, Any]) -> None:
        """An event of the Responses API, from a pool that serves it natively."""
        if kind == "response.output_text.delta" or kind.endswith("arguments.delta"):
            delta = message.get("delta")
            if isinstance(delta, str) and delta:
                if kind == "response.output_text.delta":
                    self.output_parts.append(delta)
                self.content_events += 1
            return
        response = message.get("response")
        if not isinstance(response, dict):
            return
        if self.response_id is None:
            self.response_id = response.get("id")
            self.response_model = response.get("model")
        usage = response.get("usage")
        if isinstance(usage, dict):
            self.usage = usage
        status = response.get("status")
        if kind != "response.in_progress" and kind != "response.created" and status:
            self.finish_reasons.append(str(status))

    def _meter_choices(self, choices: list[Any]) -> None:
        produced = False
        for choice in choices:
            if type(choice) is not dict:
                continue
            delta = choice.get("delta")
            if type(delta) is dict:
                text = delta.get("content")
                output = text or delta.get("tool_calls") or delta.get("reasoning_content")
            else:
                text = output = choice.get("text")
            if output:
                produced = True
                if text and type(text) is str:
                    self.output_parts.append(text)
            reason = choice.get("finish_reason")
            if reason:
                self.finish_reasons.append(reason)
        if produced:
            self.content_events += 1


def _data_of(event: bytes) -> bytes | None:
    """The ``data:`` payload of one SSE event (joined if on several lines), else None."""
    if event.startswith(b"data: ") and b"\n" not in event:
        return event[6:].strip()
    lines = [line[5:].lstrip() for line in event.split(b"\n") if line.startswith(b"data:")]
    return b"\n".join(lines).strip() if lines else None
