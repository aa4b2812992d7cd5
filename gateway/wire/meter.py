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

Decoding every event was a quarter of a stream's CPU in the gateway (README, Performance), so
once the first token has been seen, an event that is one ``data: {...}`` line with
``"finish_reason":null``, no finish reason that is a string and no ``"usage"`` (a token delta,
as vLLM writes them; these quotes are the JSON's own, a quote inside a string is escaped) is
kept undecoded: it counts as a content event arriving with its chunk. Its text is decoded only
when something needs it: when the stream ends without the upstream's usage (billing counts the
delivered text), or when ``content_events`` or ``output_parts`` are read. Events with a finish
reason or a usage block, and every event before the first token, are always decoded.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import orjson

from gateway.wire.outcome import Delivered
from gateway.wire.usage import usage_from_upstream

_DONE = b"[DONE]"
_PLAIN_DELTA = b'"finish_reason":null'
_FINISHED = b'"finish_reason":"'


class StreamMeter:
    __slots__ = (
        "_clock",
        "_content_events",
        "_deferred",
        "_output_parts",
        "_strip_usage",
        "_tail",
        "done",
        "events",
        "finish_reasons",
        "first_token_at",
        "last_token_at",
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
        self._content_events = 0
        self.first_token_at: float | None = None
        self.last_token_at: float | None = None
        self._output_parts: list[str] = []
        self._deferred: list[bytes] = []
        """Token deltas kept undecoded (see the module docstring)."""
        self.usage: dict[str, Any] | None = None
        self.finish_reasons: list[str] = []
        self.response_id: str | None = None
        self.response_model: str | None = None
        self.done = False

    @property
    def content_events(self) -> int:
        """Events that carried output (deferred ones decoded first)."""
        self._decode_deferred()
        return self._content_events

    @property
    def output_parts(self) -> list[str]:
        """The text delivered, to count the output of a stream cut before its usage came."""
        self._decode_deferred()
        return self._output_parts

    def feed(self, chunk: bytes) -> bytes:
        """Meter one chunk; returns the bytes to forward to the client.

        The hot loop of a stream: events of one chunk arrived together, so the clock is read once
        a chunk; a token delta after the first token is kept undecoded (module docstring), any
        other single-line event goes straight to ``orjson``, the rest through
        :meth:`_message_of`."""
        data = self._tail + chunk if self._tail else chunk
        complete = data.split(b"\n\n")
        tail = self._tail = complete.pop()
        strip = self._strip_usage
        if not complete:
            return b"" if strip else chunk
        usage_only: list[bytes] = []  # the usage-only events of this chunk (the gateway's)
        meter, loads, deferred = self._meter_message, orjson.loads, self._deferred
        deferred_before = len(deferred)
        produced_before = self._content_events + deferred_before
        for event in complete:
            message: Any
            if event[:7] == b"data: {" and b"\n" not in event:
                if (
                    self._content_events
                    and _PLAIN_DELTA in event
                    and _FINISHED not in event  # another choice of it may be finishing
                    and b'"usage"' not in event
                ):
                    deferred.append(event)
                    continue
                try:
                    message = loads(event[6:])
                except orjson.JSONDecodeError:
                    message = None
            else:
                message = self._message_of(event)
            if type(message) is dict and meter(message):
                usage_only.append(event)
        self.events += len(deferred) - deferred_before
        if self._content_events + len(deferred) != produced_before:
            self._tokens_arrived()
        if not strip:
            return chunk
        # Only whole events are forwarded in stripping mode; the tail waits for its end.
        if not usage_only:
            return data[: len(data) - len(tail)] if tail else data
        kept = [event for event in complete if event not in usage_only]
        return b"\n\n".join(kept) + b"\n\n" if kept else b""

    def _decode_deferred(self) -> None:
        """Decode the token deltas kept undecoded, in order (their times are already noted)."""
        if not self._deferred:
            return
        deferred, self._deferred = self._deferred, []
        for event in deferred:
            message = self._message_of(event)
            if message is not None:
                self.events -= 1  # counted when it was kept
                self._meter_message(message)

    def feed_decoded(self, chunk: bytes) -> list[dict[str, Any]]:
        """Meter one chunk; returns its complete events, decoded, for a translator (the
        Responses API) that writes other bytes than the upstream's. Each event is parsed once,
        for the meter and the translator alike."""
        data = self._tail + chunk if self._tail else chunk
        *complete, self._tail = data.split(b"\n\n")
        decoded = []
        produced_before = self._content_events
        for event in complete:
            message = self._message_of(event)
            if message is not None:
                self._meter_message(message)
                decoded.append(message)
        if self._content_events != produced_before:
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
        """What was delivered, as one value (see :class:`gateway.wire.outcome.Delivered`).

        Without the upstream's usage the deferred token deltas are decoded (billing counts the
        delivered text); with it they stay undecoded: each counts as a content event, and the
        text, which nothing reads then, is left empty."""
        if self.usage is None:
            self._decode_deferred()
        deferred = self._deferred
        return Delivered(
            status=status,
            upstream_status=upstream_status,
            first_byte_at=first_byte_at,
            first_token_at=self.first_token_at,
            last_token_at=self.last_token_at,
            content_events=self._content_events + len(deferred),
            upstream_usage=None if self.usage is None else usage_from_upstream(self.usage),
            output_text="" if deferred else "".join(self._output_parts),
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
                    self._output_parts.append(delta)
                self._content_events += 1
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
                    self._output_parts.append(text)
            reason = choice.get("finish_reason")
            if reason:
                self.finish_reasons.append(reason)
        if produced:
            self._content_events += 1


def _data_of(event: bytes) -> bytes | None:
    """The ``data:`` payload of one SSE event (joined if on several lines), else None."""
    if event.startswith(b"data: ") and b"\n" not in event:
        return event[6:].strip()
    lines = [line[5:].lstrip() for line in event.split(b"\n") if line.startswith(b"data:")]
    return b"\n".join(lines).strip() if lines else None
