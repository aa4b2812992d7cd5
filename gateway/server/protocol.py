"""uvicorn's httptools protocol with the limits an internet edge needs and uvicorn lacks.

uvicorn bounds none of these: its keep-alive timer starts only after a response, so a client
may take forever to send its headers (slowloris); headers have no size or count limit; the body
has no deadline; a client that stops reading holds the app's ``send`` forever; there is no cap on
connections, so a flood of idle ones uses every file descriptor. This subclass adds, per
connection (all values from ``server:`` in the gateway config):

- a header deadline from accept (or the first byte of a later request) to the end of the headers:
  408 and close;
- a body deadline from the end of the headers to the end of the body, and a minimum rate: after
  ``body_grace`` a body must have come at ``min_body_rate`` bytes a second: 408 and close;
- header bytes and header lines counted as they are parsed: 431 and close;
- a send deadline while the transport's buffer is full: the connection is aborted;
- a connection cap: at the cap the connection idle longest (no request in progress: still
  sending headers, or kept alive between requests) is closed to make room; when every connection
  has a request in progress, the new one gets 503 and is closed.

Chosen by measurement over uvicorn's own settings (``limit_concurrency`` answers 503 to *new*
requests while slowloris connections keep their place) and the h11 protocol (twice as slow);
see loadtests/bench_hostile.py and README "Hardening".
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import httptools
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from gateway.errors import HeaderFieldsTooLarge, Overloaded, RequestTimeout
from gateway.server.uvicorn_config import EdgeUvicornConfig

_REASONS = {408: b"Request Timeout", 431: b"Request Header Fields Too Large"}
_REASONS[503] = b"Service Unavailable"
# Written before or outside the app, so built once here, by the one error tree.
_BODIES = {
    408: RequestTimeout("The request was not received in time.").body(),
    431: HeaderFieldsTooLarge("The request headers are too large or too many.").body(),
    503: Overloaded("The gateway has too many connections; retry shortly.").body(),
}


def raw_response(status: int, extra: bytes = b"") -> bytes:
    """A complete HTTP/1.1 answer written straight to the transport, before or outside the app."""
    body = _BODIES[status]
    return (
        b"HTTP/1.1 %d %s\r\ncontent-type: application/json\r\ncontent-length: %d\r\n"
        b"connection: close\r\n%s\r\n%s" % (status, _REASONS[status], len(body), extra, body)
    )


class HeadersTooLarge(Exception):
    """Raised inside a parser callback: httptools stops parsing and re-raises it as the cause."""


class EdgeHttpToolsProtocol(HttpToolsProtocol):
    config: EdgeUvicornConfig

    def __init__(self, config: EdgeUvicornConfig, *args: Any, **kwargs: Any) -> None:
        super().__init__(config, *args, **kwargs)
        self.limits = config.limits
        self.waiting = config.waiting
        self._deadline: asyncio.TimerHandle | None = None
        self._send_deadline: asyncio.TimerHandle | None = None
        self._reading_head = True
        self._head_raw = 0  # bytes received while reading a head (bounds a line still arriving)
        self._head_bytes = 0  # bytes of the request line and headers parsed so far
        self._header_count = 0
        self._body_started = 0.0
        self._body_bytes = 0

    # Connection life

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(transport)  # type: ignore[arg-type]
        if len(self.connections) > self.config.effective_max_connections and not self._evict():
            self.connections.discard(self)
            self.transport.write(raw_response(503, b"retry-after: 1\r\n"))
            self.transport.close()
            return
        self.waiting[self] = None
        self._arm(self.limits.header_timeout, self._header_timeout)

    def connection_lost(self, exc: Exception | None) -> None:
        self.waiting.pop(self, None)
        self._disarm()
        if self._send_deadline is not None:
            self._send_deadline.cancel()
        super().connection_lost(exc)

    def _evict(self) -> bool:
        """Close the connection idle longest to make room; False when none is idle."""
        for victim in self.waiting:
            if victim is not self:
                del self.waiting[victim]
                victim.transport.close()
                return True
        return False

    # Reading the request

    def data_received(self, data: bytes) -> None:
        self._unset_keepalive_if_required()
        if self._reading_head:
            self._head_raw += len(data)
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserCallbackError as err:
            if isinstance(err.__context__, HeadersTooLarge):
                self._refuse(431)
            else:
                self._bad_request()
            return
        except httptools.HttpParserUpgrade:
            self.handle_upgrade()
            return
        except httptools.HttpParserError:
            self._bad_request()
            return
        # A header line still arriving is buffered by the parser: bound it by the bytes seen.
        if self._reading_head and self._head_raw > self.limits.max_header_bytes:
            self._refuse(431)

    def handle_upgrade(self) -> None:
        if self._should_upgrade():
            self.handle_websocket_upgrade()
        else:
            self._unsupported_upgrade_warning()

    def _bad_request(self) -> None:
        self.logger.warning("Invalid HTTP request received.")
        self.send_400_response("Invalid HTTP request received.")

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self._reading_head = True
        self._head_bytes = self._header_count = 0
        if self._deadline is None:  # the first request keeps the deadline armed at accept
            self._arm(self.limits.header_timeout, self._header_timeout)

    def on_url(self, url: bytes) -> None:
        self._count(len(url))
        super().on_url(url)

    def on_header(self, name: bytes, value: bytes) -> None:
        self._header_count += 1
        if self._header_count > self.limits.max_headers:
            raise HeadersTooLarge
        self._count(len(name) + len(value) + 4)
        super().on_header(name, value)

    def _count(self, size: int) -> None:
        self._head_bytes += size
        if self._head_bytes > self.limits.max_header_bytes:
            raise HeadersTooLarge

    def on_headers_complete(self) -> None:
        self.waiting.pop(self, None)  # a request in progress is not evicted
        self._reading_head = False
        self._head_raw = 0
        # One timer a request, first at the grace period; a body still arriving re-arms it.
        self._body_started, self._body_bytes = self.loop.time(), 0
        limits = self.limits
        self._arm(min(limits.body_grace, limits.body_timeout), self._body_timeout)
        super().on_headers_complete()

    def on_body(self, body: bytes) -> None:
        self._body_bytes += len(body)
        super().on_body(body)

    def on_message_complete(self) -> None:
        self._disarm()
        super().on_message_complete()

    def on_response_complete(self) -> None:
        super().on_response_complete()
        if not self.transport.is_closing() and not self.pipeline:
            self.waiting[self] = None  # idle between requests: first to go at the cap

    # Deadlines

    def _arm(self, seconds: float, handler: Callable[[], None]) -> None:
        self._disarm()
        self._deadline = self.loop.call_later(seconds, handler)

    def _disarm(self) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None

    def _header_timeout(self) -> None:
        self._deadline = None
        if self.transport.is_closing():
            return
        if self._head_raw or self._head_bytes:  # a request had begun: say why it ends
            self.transport.write(raw_response(408))
        self.transport.close()

    def _body_timeout(self) -> None:
        self._deadline = None
        cycle = self.cycle
        if self.transport.is_closing() or cycle is None or not cycle.more_body:
            return
        left = self._body_allowed() - self.loop.time()
        if left > 0:  # it keeps the minimum rate: looked at again when its time is up
            self._arm(left, self._body_timeout)
            return
        if not cycle.response_started:
            cycle.response_started = cycle.response_complete = True  # the app's answer is moot
            self.transport.write(raw_response(408))
        cycle.disconnected = True
        cycle.message_event.set()
        self.transport.close()

    def _body_allowed(self) -> float:
        """When the body must be in: the grace period plus its bytes so far at the minimum
        rate, within the body deadline."""
        limits = self.limits
        earned = limits.body_grace + self._body_bytes / limits.min_body_rate
        return self._body_started + min(earned, limits.body_timeout)

    def _refuse(self, status: int) -> None:
        self._disarm()
        self.logger.warning("Refused a request: %d.", status)
        self.transport.write(raw_response(status))
        self.transport.close()

    # Writing the answer

    def pause_writing(self) -> None:
        super().pause_writing()
        if self._send_deadline is None:
            self._send_deadline = self.loop.call_later(self.limits.send_timeout, self._send_expired)

    def resume_writing(self) -> None:
        if self._send_deadline is not None:
            self._send_deadline.cancel()
            self._send_deadline = None
        super().resume_writing()

    def _send_expired(self) -> None:
        self._send_deadline = None
        self.transport.abort()  # close() would wait for the unread buffer to drain
