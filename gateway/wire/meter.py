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
once the first token has been seen, token deltas are kept undecoded: events that are each one
``data: {...}`` line with ``"finish_reason":null``, no finish reason that is a string and no
``"usage"`` (as vLLM writes them; these quotes are the JSON's own, a quote inside a string is
escaped). A run of them, one or the many a busy gateway reads at once, is checked as a whole by
counting those marks, and each counts as a content event arriving with its chunk. Their text is
decoded only when something needs it: when the stream ends without the upstream's usage
(billing counts the delivered text), or when ``content_events`` or ``output_parts`` are read.
Events with a finish reason or a usage block, and every event before the first token, are
always decoded.

The upstream is bounded like a client: CRLF line ends are read as LF (the SSE framing allows
both), and an event still unended past ``MAX_EVENT_BYTES`` raises :class:`OversizedEvent`, which
the relay ends the stream with, as it does any upstream failure (the chunk that passed the bound
is neither forwarded nor metered). The pieces of an unended event
are held as they came and joined once its end arrives, so a long event is not copied again for
each piece.

A chunk that is one whole token delta (what a stream paced like an engine's reaches the gateway
as: one event a read) is checked and kept by :func:`_one_plain_delta` before any of the framing
above: a few scans of the chunk, no slicing, no run bookkeeping. Same rule, same result; a
chunk it does not take (CRLF framing, a piece of an event held, anything else) goes the
general way. Searches on the hot path use ``bytes.find``, not ``in``: CPython's ``bytes``
``__contains__`` first tries its operand as an integer and clears the TypeError that raises,
which made ``in`` 2-3x slower than ``find`` on a 200-byte event here.
"""

from __future__ import annotations

import time
from typing import Any

import orjson

from gateway.clock import Reading
from gateway.errors import UpstreamError
from gateway.wire.outcome import Delivered
from gateway.wire.usage import usage_from_upstream

_DONE = b"[DONE]"
_PLAIN_DELTA = b'"finish_reason":null'
_FINISHED = b'"finish_reason":"'
_USAGE = b'"usage"'
_REASON = b'"finish_reason":'

MAX_EVENT_BYTES = 1 << 20
"""The most bytes of one event held before its end (as loadtests/pdload/sse.py bounds it)."""


class OversizedEvent(UpstreamError):
    """The upstream sent more than ``MAX_EVENT_BYTES`` of one event without ending it."""

    default_code = "upstream_event_too_large"

    def __init__(self) -> None:
        super().__init__(f"The upstream sent a stream event larger than {MAX_EVENT_BYTES} bytes.")


class StreamMeter:
    __slots__ = (
        "_clock",
        "_content_events",
        "_deferred",
        "_deferred_events",
        "_edge",
        "_held",
        "_held_bytes",
        "_output_parts",
        "_strip_usage",
        "done",
        "events",
        "finish_reasons",
        "first_token_at",
        "last_token_at",
        "response_id",
        "response_model",
        "usage",
    )

    def __init__(self, *, strip_usage: bool = False, clock: Reading = time.perf_counter) -> None:
        self._clock = clock
        self._strip_usage = strip_usage
        self._held: list[bytes] = []
        """The pieces of the event not yet ended, as they came (CRLF is made LF when joined)."""
        self._held_bytes = 0
        self._edge = b""
        """The last two bytes held: where an event end may straddle two chunks."""
        self.events = 0
        self._content_events = 0
        self.first_token_at: float | None = None
        self.last_token_at: float | None = None
        self._output_parts: list[str] = []
        self._deferred: list[bytes] = []
        """Runs of token deltas kept undecoded, whole events each (see the module docstring)."""
        self._deferred_events = 0
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
        a chunk; after the first token, a run of token deltas is kept undecoded at once (module
        docstring), any other single-line event goes straight to ``orjson``, the rest through
        :meth:`_message_of`."""
        if self._kept_alone(chunk):  # the paced stream's hot path (module docstring)
            return chunk
        strip = self._strip_usage
        data = self._joined(chunk)
        end = -1 if data is None else data.rfind(b"\n\n") + 2  # the end of the last event
        if data is None or end < 2:
            if data is not None:
                self._hold(data)
            return b"" if strip else chunk
        self._hold(data[end:])
        usage_only: list[tuple[int, int]] = []  # where the usage-only events are (the gateway's)
        meter = self._meter_message
        produced_before = self._content_events + self._deferred_events
        pos, mark, runs = 0, -1, True
        while pos < end:
            if runs and self._content_events:  # after the first token: a run of deltas at once
                if mark < pos:
                    mark = _next_mark(data, pos, end)
                run_end = self._keep_run(data, pos, mark, end)
                if run_end < 0:
                    runs = False  # not plain deltas: this chunk's events one by one
                elif run_end == end:
                    break
                else:
                    pos = run_end
            start, stop = pos, data.find(b"\n\n", pos)
            event, pos = data[start:stop], stop + 2
            message = self._single_line(event)
            if type(message) is dict and meter(message):
                usage_only.append((start, pos))
        if self._content_events + self._deferred_events != produced_before:
            self._tokens_arrived()
        # Only whole events are forwarded in stripping mode; the tail waits for its end.
        return _without(data, end, usage_only) if strip else chunk

    def _single_line(self, event: bytes) -> Any:
        """The JSON value of a one-line ``data: {`` event straight from ``orjson`` (None if it
        is not JSON); any other event through :meth:`_message_of`."""
        if event[:7] == b"data: {" and event.find(b"\n") < 0:
            try:
                return orjson.loads(event[6:])
            except orjson.JSONDecodeError:
                return None
        return self._message_of(event)

    def _kept_alone(self, chunk: bytes) -> bool:
        """After the first token, with nothing held: keep ``chunk`` undecoded if it is one
        whole plain token delta (:func:`_one_plain_delta`); its time is the last token's."""
        if not self._content_events or self._held or not _one_plain_delta(chunk):
            return False
        self._deferred.append(chunk)
        self._deferred_events += 1
        self.events += 1
        self.last_token_at = self._clock()  # the first token's time was noted already
        return True

    def _keep_run(self, data: bytes, start: int, mark: int, end: int) -> int:
        """Keep the events from ``start`` on undecoded, up to the one holding ``mark`` (a finish
        reason or a usage block: :func:`_next_mark`), if they are all plain token deltas: each
        one line, starting with ``data: {``, with ``"finish_reason":null``. Returns where the
        run ended (``start``: the next event has the mark), or -1 when it held anything else (a
        comment, ``[DONE]``, another layout).

        Checked by counts, which the C code does: a burst of deltas (a busy gateway reads many
        at once) costs a few scans, not a Python step each."""
        if mark < end:
            before = data.rfind(b"\n\n", start, mark)
            if before < 0:
                return start
            end = before + 2
        n = data.count(b"\n\n", start, end)
        if (
            data.count(b"\n", start, end) != 2 * n
            or data.count(b"data: {", start, end) != n
            or data.count(_PLAIN_DELTA, start, end) != n
        ):
            return -1
        self._deferred.append(data[start:end])
        self._deferred_events += n
        self.events += n
        return end

    def _decode_deferred(self) -> None:
        """Decode the token deltas kept undecoded, in order (their times are already noted)."""
        if not self._deferred:
            return
        deferred, self._deferred, self._deferred_events = self._deferred, [], 0
        for run in deferred:
            for event in run.split(b"\n\n"):
                message = self._message_of(event) if event else None
                if event:
                    self.events -= 1  # counted when it was kept
                if message is not None:
                    self._meter_message(message)

    def feed_decoded(self, chunk: bytes) -> list[dict[str, Any]]:
        """Meter one chunk; returns its complete events, decoded, for a translator (the
        Responses API) that writes other bytes than the upstream's. Each event is parsed once,
        for the meter and the translator alike."""
        data = self._joined(chunk)
        if data is None:
            return []
        *complete, tail = data.split(b"\n\n")
        self._hold(tail)
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

    def _joined(self, chunk: bytes) -> bytes | None:
        """The bytes held and ``chunk`` as one, CRLF line ends made LF, if an event may end in
        them; else None, and ``chunk`` is held (see :meth:`_hold`). The hot path, nothing held
        and LF framing, returns the chunk itself."""
        if not self._held:
            return chunk.replace(b"\r\n", b"\n") if chunk.find(b"\r") >= 0 else chunk
        # After normalising, an event ends at "\n\n", which was "\n\n" or "\n\r\n" here.
        edge = self._edge + chunk[:2]
        if not any(end in edge or end in chunk for end in (b"\n\n", b"\n\r\n")):
            self._hold(chunk)
            return None
        data = b"".join((*self._held, chunk))
        self._held, self._held_bytes, self._edge = [], 0, b""
        return data.replace(b"\r\n", b"\n") if data.find(b"\r") >= 0 else data

    def _hold(self, piece: bytes) -> None:
        """Keep a piece of an unended event; past ``MAX_EVENT_BYTES`` the stream is broken."""
        if not piece:
            return
        self._held.append(piece)
        self._held_bytes += len(piece)
        self._edge = (self._edge + piece[-2:])[-2:]
        if self._held_bytes > MAX_EVENT_BYTES:
            self._held, self._held_bytes, self._edge = [], 0, b""  # never forwarded
            raise OversizedEvent

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
        deferred = self._deferred_events
        return Delivered(
            status=status,
            upstream_status=upstream_status,
            first_byte_at=first_byte_at,
            first_token_at=self.first_token_at,
            last_token_at=self.last_token_at,
            content_events=self._content_events + deferred,
            upstream_usage=None if self.usage is None else usage_from_upstream(self.usage),
            output_text="" if deferred else "".join(self._output_parts),
            finish_reasons=tuple(self.finish_reasons),
            response_id=self.response_id if isinstance(self.response_id, str) else None,
            response_model=self.response_model if isinstance(self.response_model, str) else None,
            error_code=error_code,
        )

    def flush(self) -> bytes:
        """What is left at the end of the stream (an unterminated event, in stripping mode)."""
        tail = b"".join(self._held)
        self._held, self._held_bytes, self._edge = [], 0, b""
        return tail if self._strip_usage else b""

    def _message_of(self, event: bytes) -> dict[str, Any] | None:
        """The JSON object an event carries; None for ``[DONE]`` (noted), comments, non-objects."""
        if event.startswith(b"data: ") and event.find(b"\n") < 0:
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


def _one_plain_delta(chunk: bytes) -> bool:
    """``chunk`` is one whole event, one ``data: {`` line whose only finish reason is null and
    which has no usage block: the rule :meth:`StreamMeter._keep_run` checks by counts, for one
    event. The first scan stops at the finish reason, the second starts there."""
    reason = chunk.find(_REASON)
    return (
        reason > 0
        and chunk.startswith(b"null", reason + 16)
        and chunk.find(_REASON, reason + 20) < 0
        and chunk.endswith(b"\n\n")
        and chunk.find(b"\n") == len(chunk) - 2
        and chunk[-3] != 13  # not CR LF LF: LF framing only (CRLF is normalised the long way)
        and chunk.startswith(b"data: {")
        and chunk.find(_USAGE) < 0
    )


def _without(data: bytes, end: int, spans: list[tuple[int, int]]) -> bytes:
    """``data`` up to ``end`` less the events at ``spans``."""
    if not spans:
        return data[:end]
    kept, at = [], 0
    for start, stop in spans:
        kept.append(data[at:start])
        at = stop
    kept.append(data[at:end])
    return b"".join(kept)


def _next_mark(data: bytes, start: int, end: int) -> int:
    """Where the next event that must be decoded has its mark (a finish reason that is a string,
    or a usage block), else ``end``. Searched again only once passed, so a chunk is scanned once
    for each mark however many runs it holds."""
    finish = data.find(_FINISHED, start, end)
    if finish < 0:
        finish = end
    usage = data.find(_USAGE, start, finish)
    return finish if usage < 0 else usage


def _data_of(event: bytes) -> bytes | None:
    """The ``data:`` payload of one SSE event (joined if on several lines), else None."""
    if event.startswith(b"data: ") and event.find(b"\n") < 0:
        return event[6:].strip()
    lines = [line[5:].lstrip() for line in event.split(b"\n") if line.startswith(b"data:")]
    return b"\n".join(lines).strip() if lines else None
