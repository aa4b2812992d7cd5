"""Stage 6, relay: upstream bytes to the client as they arrive, never buffered or re-serialised.

An upstream that fails or stalls after the stream has started cannot change the status any more;
the stream then ends with an OpenAI-style error event, which the OpenAI SDKs raise as an error.
The relay keeps what it delivered (its meter, the status sent, the first byte's time), so what
was delivered is known however the exchange ends, a client that left mid-stream included::

    relay = Relay(sink, strip_usage=request.strip_usage)
    await relay.answer(response, headers)      # or: await relay.refuse(err, headers)
    relay.delivered()                          # -> Delivered

A translated operation (the Responses API on a chat upstream) passes a :class:`ChunkTranslator`
to :meth:`Relay.answer`: the meter still reads the upstream's own chunks (so the usage is the
upstream's, whatever the client is sent) and the translator writes what the client gets. Without
one, the chat path forwards the upstream's bytes as they came.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Protocol

import orjson

from gateway.asgi import JSON
from gateway.errors import GatewayError, error_body
from gateway.proxy.sink import Header, Sink, send_whole
from gateway.upstream.client import UpstreamResponse
from gateway.wire.meter import StreamMeter
from gateway.wire.outcome import Delivered
from gateway.wire.usage import Usage, usage_from_upstream


class ChunkTranslator(Protocol):
    """Rewrites an upstream answer for the client, event by event
    (gateway/responses_translation/)."""

    def opening(self) -> bytes:
        """Sent as soon as the stream starts."""

    def chunks(self, messages: Iterable[Mapping[str, Any]]) -> bytes:
        """The bytes for the upstream's decoded events of one chunk."""

    def closing(self, usage: Usage | None) -> bytes:
        """The end of a clean stream, with the upstream's usage as the meter read it."""

    def failing(self, err: GatewayError) -> bytes:
        """The end of a stream the upstream broke."""

    def whole(self, document: bytes, usage: Usage | None) -> bytes:
        """A whole (non-streaming) 2xx answer."""

    async def finished(self) -> None:
        """The answer is complete, its last bytes about to go out (a stored response is
        written here, so that the client's next request finds it)."""


class Relay:
    __slots__ = (
        "_first_byte_at",
        "_on_first_byte",
        "_sink",
        "error_code",
        "meter",
        "status",
        "upstream_status",
    )

    def __init__(
        self, sink: Sink, *, strip_usage: bool, on_first_byte: Callable[[], None] | None = None
    ) -> None:
        """``on_first_byte``: told when a stream's first bytes come back from the upstream
        (the engine's first token: its pool stops counting the request as starting)."""
        self._sink = sink
        self._on_first_byte = on_first_byte
        self.meter = StreamMeter(strip_usage=strip_usage)
        self.status = 0
        self.upstream_status = 0
        self.error_code: str | None = None
        self._first_byte_at: float | None = None

    @property
    def started(self) -> bool:
        """The response has started: its status can no longer change."""
        return self.status != 0

    async def answer(
        self,
        response: UpstreamResponse,
        headers: Iterable[Header],
        translator: ChunkTranslator | None = None,
    ) -> bool:
        """Relay the upstream's answer; True if it ended cleanly (the connection is reusable)."""
        self.upstream_status = response.status
        if response.is_event_stream:
            if translator is not None:
                return await self._translated_stream(response, headers, translator)
            return await self._stream(response, headers)
        await self._whole(response, headers, translator)
        return True

    async def refuse(self, err: GatewayError, headers: Iterable[Header]) -> None:
        """Answer with the gateway's own error, before any upstream answer was relayed."""
        self.error_code = err.code
        self.status = err.status
        extra = [*((k.encode(), v.encode()) for k, v in err.headers.items()), *headers]
        await send_whole(self._sink, err.status, err.body(), extra_headers=extra)

    def delivered(self) -> Delivered:
        return self.meter.delivered(
            status=self.status,
            upstream_status=self.upstream_status,
            first_byte_at=self._first_byte_at,
            error_code=self.error_code,
        )

    async def _stream(self, response: UpstreamResponse, headers: Iterable[Header]) -> bool:
        sink, meter = self._sink, self.meter
        self.status = response.status
        await sink.start(response.status, [*response.relay_headers(), *headers])
        clean, last = True, b""
        try:
            async for chunk in response.chunks():
                if self._first_byte_at is None:
                    self._first_came()
                out = meter.feed(chunk)
                if out:
                    last = out
                    await sink.send(out)
        except GatewayError as err:
            self.error_code = err.code
            clean = False
            # An event broken off mid-way is ended first, so the error event is read as its own.
            cut = b"" if last.endswith((b"\n\n", b"\r\n\r\n")) or not last else b"\n\n"
            await sink.send(cut + err.sse_event())
        await sink.end(meter.flush())
        return clean

    async def _translated_stream(
        self, response: UpstreamResponse, headers: Iterable[Header], translator: ChunkTranslator
    ) -> bool:
        """A stream rewritten event by event; the meter reads the upstream's own events."""
        sink, meter = self._sink, self.meter
        self.status = response.status
        await sink.start(response.status, [*response.relay_headers(), *headers])
        await sink.send(translator.opening())
        try:
            async for chunk in response.chunks():
                if self._first_byte_at is None:
                    self._first_came()
                out = translator.chunks(meter.feed_decoded(chunk))
                if out:
                    await sink.send(out)
        except GatewayError as err:
            self.error_code = err.code
            end = translator.failing(err)
            await translator.finished()
            await sink.end(end)
            return False
        end = translator.closing(self._upstream_usage())
        await translator.finished()
        await sink.end(end)
        return True

    def _first_came(self) -> None:
        self._first_byte_at = time.perf_counter()
        if self._on_first_byte is not None:
            self._on_first_byte()

    def _upstream_usage(self) -> Usage | None:
        usage = self.meter.usage
        return None if usage is None else usage_from_upstream(usage)

    async def _whole(
        self,
        response: UpstreamResponse,
        headers: Iterable[Header],
        translator: ChunkTranslator | None = None,
    ) -> None:
        """A non-streaming answer: read it whole (it is one JSON document), then send it. An
        error answer is put into the OpenAI envelope (an upstream's 5xx may carry a traceback:
        only its status passes); a good one is forwarded byte for byte, or translated."""
        body = await response.read()
        self._first_byte_at = time.perf_counter()
        relayed = response.relay_headers()
        if response.status >= 400:
            body = upstream_error_body(response.status, body)
            relayed = [h for h in relayed if h[0] != b"content-type"]
        self.meter.observe_document(body)
        if translator is not None and 200 <= response.status < 300:
            body = translator.whole(body, self._upstream_usage())
            await translator.finished()
        content_type = next((v for k, v in relayed if k == b"content-type"), JSON)
        others = [h for h in relayed if h[0] != b"content-type"]
        self.status = response.status
        await send_whole(self._sink, response.status, body, content_type, [*others, *headers])


def upstream_error_body(status: int, body: bytes) -> bytes:
    """An upstream's error answer in the OpenAI envelope, ``code`` a string or null.

    A 4xx keeps the upstream's own message (it tells the client what to fix); a 5xx keeps only
    its status, since its body may carry internals (a Ray or vLLM traceback).
    """
    error: dict[str, Any] = {}
    try:
        document = orjson.loads(body)
    except orjson.JSONDecodeError:
        document = None
    if isinstance(document, dict) and isinstance(document.get("error"), dict):
        error = document["error"]
    elif isinstance(document, dict):  # some servers put the fields at the top level
        error = document
    message = error.get("message")
    if status >= 500 or not isinstance(message, str):
        message = f"The upstream answered with status {status}."
    code = error.get("code")
    kind = error.get("type")
    param = error.get("param")
    return error_body(
        message[:2000],
        kind if isinstance(kind, str) and status < 500 else _default_type(status),
        param if isinstance(param, str) else None,
        None if code is None else str(code)[:200],
    )


def _default_type(status: int) -> str:
    return "invalid_request_error" if status < 500 else "server_error"
