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
  sending headers, or kept alive between requests, or lingering after a refusal) is closed to
  make room; when every connection has a request in progress, the new one gets 503 and is
  closed, counted and access-logged by the app (gateway/server/refusals.py);
- a gentle close after a refusal while the client may still be sending (the app's upload caps,
  408, 431): the answer, then a half-close, then what still comes is read and dropped for
  ``linger_timeout`` (or ``max_body_bytes``) until the client closes. Closed outright, the
  kernel answers the client's next bytes with a reset, and a client still writing its body
  (most write it all before they read) sees the reset instead of the answer.

Chosen by measurement over uvicorn's own settings (``limit_concurrency`` answers 503 to *new*
requests while slowloris connections keep their place) and the h11 protocol (twice as slow);
see loadtests/bench_hostile.py and README "Hardening".
"""

from __future__ import annotations

import asyncio
import weakref
from collections.abc import Callable
from typing import Any

import httptools
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from gateway.errors import HeaderFieldsTooLarge, Overloaded, RequestTimeout
from gateway.server.refusals import REFUSALS_KEY, RefusalRecorder
from gateway.server.uvicorn_config import EdgeUvicornConfig

_REASONS = {408: b"Request Timeout", 431: b"Request Header Fields Too Large"}
_REASONS[503] = b"Service Unavailable"
# Written before or outside the app, so built once here, by the one error tree.
_TOO_MANY_CONNECTIONS = Overloaded("The gateway has too many connections; retry shortly.")
_BODIES = {
    408: RequestTimeout("The request was not received in time.").body(),
    431: HeaderFieldsTooLarge("The request headers are too large or too many.").body(),
    503: _TOO_MANY_CONNECTIONS.body(),
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
        self._lingering = False
        self._linger_left = 0  # bytes still dropped while lingering before the connection closes
        self._cycle_transport = _CycleTransport(self)

    # Connection life

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(transport)  # type: ignore[arg-type]
        if len(self.connections) > self.config.effective_max_connections and not self._evict():
            self.connections.discard(self)
            self.transport.write(raw_response(503, b"retry-after: 1\r\n"))
            self.transport.close()  # no lingering here: the point is to give the socket back
            recorder: RefusalRecorder | None = self.app_state.get(REFUSALS_KEY)
            if recorder is not None:
                recorder.refused("connections", _TOO_MANY_CONNECTIONS)
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
        if self._lingering:  # answered and half-closed: what still comes is dropped, unparsed
            self._linger_left -= len(data)
            if self._linger_left < 0:
                self.transport.close()
            return
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
        cycle = self.cycle
        super().on_headers_complete()
        if self.cycle is not cycle:  # a new request (not an upgrade): while its body is
            self.cycle.transport = self._cycle_transport  # arriving, it closes through us

    def on_body(self, body: bytes) -> None:
        self._body_bytes += len(body)
        super().on_body(body)

    def on_message_complete(self) -> None:
        self._disarm()
        cycle = self.cycle
        if cycle is not None and cycle.transport is self._cycle_transport:
            # Read whole: a close is at once again, so the answer's writes (a stream's every
            # event) go straight to the transport, not through the wrapper's extra calls.
            cycle.transport = self.transport
        super().on_message_complete()

    def on_response_complete(self) -> None:
        if self._lingering:  # no keep-alive, no next request: the connection is ending
            self.server_state.total_requests += 1
            return
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
            self.close_gently()
        else:
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
        self.close_gently()

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
        self.close_gently()

    # Closing

    def close_after_answer(self) -> None:
        """The request's cycle closes the connection (a ``connection: close`` answer, or a
        failed one): at once when the request was read whole, else gently."""
        cycle = self.cycle
        if cycle is not None and cycle.more_body:
            self.close_gently()
        else:
            self.transport.close()

    def close_gently(self) -> None:
        """Half-close after the answer already written; then read and drop what the client
        still sends until it closes (its end of file closes the transport), ``linger_timeout``
        passes or ``max_body_bytes`` are dropped."""
        transport = self.transport
        if transport.is_closing() or self._lingering:
            return
        if not transport.can_write_eof():
            transport.close()
            return
        self._lingering = True
        self._linger_left = self.limits.max_body_bytes
        self.waiting[self] = None  # answered: the cap may close it to make room
        self._arm(self.limits.linger_timeout, self._linger_expired)
        self.flow.resume_reading()  # a body past the high-water mark had paused reading
        transport.write_eof()  # sent once the answer is: the client reads it, then the end

    def _linger_expired(self) -> None:
        self._deadline = None
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


class _CycleTransport(asyncio.Transport):
    """What a request's cycle (uvicorn's ``RequestResponseCycle``) writes to: the connection's
    transport, except that its close is the protocol's, which lingers while a body is arriving.
    One per connection, given to a request's cycle from the end of its headers to the end of its
    body (a request read whole writes to the transport itself); the cycle only writes, asks
    whether it is closing, and closes.

    It holds its protocol weakly: a strong reference would make every connection a reference
    cycle (the protocol holds it), freed only by the cyclic collector, which the served process
    runs rarely (gateway/server/memory.py), so memory would grow with the connections."""

    def __init__(self, protocol: EdgeHttpToolsProtocol) -> None:
        super().__init__()
        self._protocol = weakref.ref(protocol)

    def write(self, data: bytes | bytearray | memoryview) -> None:
        protocol = self._protocol()
        if protocol is not None:
            protocol.transport.write(data)

    def is_closing(self) -> bool:
        protocol = self._protocol()
        return protocol is None or protocol.transport.is_closing()

    def close(self) -> None:
        protocol = self._protocol()
        if protocol is not None:
            protocol.close_after_answer()
