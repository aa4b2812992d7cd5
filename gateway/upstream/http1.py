"""The upstream client: HTTP/1.1 keep-alive connections on asyncio, responses parsed by httptools.

The gateway sends one kind of request to upstreams it is configured with: a ``POST`` of a body it
already holds, to a replica URL, with a handful of headers it built itself; and a ``GET`` for
health probes and the engines' ``/metrics`` (``get``, its body bounded). aiohttp's general
client (cookies, redirects, proxies, auth, payload types, trace signals, a request and a
response object of several dozen fields) cost a third of the bare
gateway's CPU per request; this client does the same exchange in a fraction of that (the
figures: README, Performance). What it keeps of an HTTP client:

- the response is parsed by httptools (llhttp, the parser uvicorn serves with): status, headers,
  content-length, chunked transfer coding, keep-alive, all by the parser;
- connections are pooled per host, at most ``max_connections`` open per pool (the rest wait for
  one), reused only after a complete response (and only within ``KEEPALIVE_S``), dropped when
  the peer closes them or a response was not read to its end;
- a connection deadline, and per response a watchdog enforcing the idle gap and total deadline
  (one timer a response, re-armed only when it fires);
- reading is paused while a slow client leaves more than ``HIGH_WATER`` bytes unread;
- ``https`` upstreams through the default TLS context.

Errors are the gateway's own: ``UpstreamConnectError`` (nothing was sent: safe to retry
elsewhere), ``UpstreamTimeout``, ``UpstreamError``.
"""

from __future__ import annotations

import asyncio
import base64
import ssl
import time
from collections import deque
from collections.abc import AsyncIterator
from functools import lru_cache
from typing import NamedTuple, cast
from urllib.parse import unquote

import httptools

from gateway.clock import Reading
from gateway.errors import UpstreamError, UpstreamTimeout
from gateway.upstream.client import Headers, UpstreamConnectError, UpstreamSettings, relayable
from gateway.upstream.config import Timeouts

# An idle connection older than this is closed rather than reused: below the keep-alive timeout
# of the servers in front of engines (uvicorn's default, Ray Serve's proxy, is 5 s), so the
# gateway does not write a request into a connection the server is closing.
KEEPALIVE_S = 4.0
# An upstream's response headers, at most (a broken or hostile upstream could send them forever).
MAX_HEADER_BYTES = 64 * 1024
# Unread body bytes above which the upstream socket stops being read until the client catches up.
HIGH_WATER = 256 * 1024


class Target(NamedTuple):
    """Where a URL's requests go, and the start of every request to it."""

    key: tuple[str, int, bool]  # host, port, TLS
    head: bytes  # "POST /path HTTP/1.1\r\nhost: h:p\r\n"
    get_head: bytes


@lru_cache(maxsize=4096)  # replica URLs times paths: a small, fixed set per config
def target(url: str) -> Target:
    """Parse a replica URL once: scheme, host and port, path; credentials in it become a Basic
    ``authorization`` header, as a browser or aiohttp would send them."""
    scheme, sep, rest = url.partition("://")
    if not sep or scheme not in ("http", "https"):
        raise UpstreamConnectError(f"Could not connect to the upstream: bad URL scheme {scheme!r}.")
    authority, slash, path = rest.partition("/")
    path = slash + path if slash else "/"
    userinfo, at, authority = authority.rpartition("@")
    if authority.startswith("["):  # an IPv6 literal
        end = authority.find("]")
        host, port_text = authority[1:end], authority[end + 2 :]
    else:
        host, _, port_text = authority.partition(":")
    tls = scheme == "https"
    port = int(port_text) if port_text else (443 if tls else 80)
    lines = f"host: {authority}\r\n"
    if at:
        credentials = base64.b64encode(unquote(userinfo).encode()).decode()
        lines += f"authorization: Basic {credentials}\r\n"
    common = b" HTTP/1.1\r\n" + lines.encode("latin-1")
    path_bytes = path.encode("latin-1")
    return Target((host, port, tls), b"POST " + path_bytes + common, b"GET " + path_bytes + common)


def _request_bytes(head: bytes, headers: Headers, body: bytes) -> bytes:
    parts = [head, b"content-length: ", str(len(body)).encode(), b"\r\n"]
    for name, value in headers:
        # The parser that read them would have refused CR or LF, but a value may come from
        # config or a header the gateway built: never let one end the header block.
        if _breaks_line(value) or _breaks_line(name):
            raise UpstreamError("A header for the upstream contained a line break.")
        parts += [name, b": ", value, b"\r\n"]
    parts += [b"\r\n", body]
    return b"".join(parts)


def _breaks_line(text: bytes) -> bool:
    # find, not ``in``: bytes' ``in`` first tries its operand as an int (a TypeError, cleared).
    return text.find(b"\r") >= 0 or text.find(b"\n") >= 0


class _Connection(asyncio.Protocol):
    """One TCP connection; one exchange at a time. The parser's callbacks fill the exchange."""

    def __init__(self, pool: Http1Upstream, key: tuple[str, int, bool]) -> None:
        self.pool = pool
        self.key = key
        self.transport: asyncio.Transport | None = None
        self.parser = httptools.HttpResponseParser(self)
        self.response: Http1Response | None = None
        self.closed = False
        self.idle_since = 0.0

    # asyncio.Protocol

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's is not a subclass

    def data_received(self, data: bytes) -> None:
        if self.response is None:  # bytes nobody asked for, on an idle connection
            self.close()
            return
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserError as err:
            self._fail(UpstreamError(f"The upstream sent a malformed answer: {err}."))
            self.close()
        except httptools.HttpParserUpgrade:
            self._fail(UpstreamError("The upstream switched protocols."))
            self.close()

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        response = self.response
        if response is not None:
            response._connection_lost()
        self.pool._forget(self)

    # httptools callbacks

    def on_header(self, name: bytes, value: bytes) -> None:
        response = self.response
        assert response is not None
        response._header_bytes += len(name) + len(value)
        if response._header_bytes > MAX_HEADER_BYTES:  # llhttp itself sets no bound
            self._fail(UpstreamError(f"The upstream's headers passed {MAX_HEADER_BYTES} bytes."))
            raise httptools.HttpParserError("headers too large")  # stops the parser
        response._raw_headers.append((name, value))

    def on_headers_complete(self) -> None:
        response = self.response
        assert response is not None
        response.status = self.parser.get_status_code()
        response._keep_alive = self.parser.should_keep_alive()
        response._headers_done()

    def on_body(self, body: bytes) -> None:
        assert self.response is not None
        self.response._feed(body)

    def on_message_complete(self) -> None:
        assert self.response is not None
        self.response._complete()

    # used by the pool and the response

    def start(self, response: Http1Response, request: bytes) -> None:
        assert self.transport is not None
        self.response = response
        self.transport.write(request)

    def _fail(self, err: UpstreamError) -> None:
        if self.response is not None:
            self.response._error(err)

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            if self.transport is not None:
                self.transport.abort()  # no lingering: its response will not be read


class Http1Response:
    """An upstream response: headers when ``send`` returns, then the body as it arrives."""

    def __init__(self, connection: _Connection, loop: asyncio.AbstractEventLoop) -> None:
        self._connection = connection
        self._loop = loop
        self.status = 0
        self.is_event_stream = False
        self._raw_headers: list[tuple[bytes, bytes]] = []
        self._header_bytes = 0
        self._keep_alive = False
        self._framed = True  # content-length or chunked: the end is known without a close
        self._headers_waiter: asyncio.Future[None] | None = loop.create_future()
        self._chunks: deque[bytes] = deque()
        self._buffered = 0
        self._paused = False
        self._done = False  # the whole body has arrived
        self._failure: UpstreamError | None = None
        self._body_waiter: asyncio.Future[None] | None = None
        self._released = False
        # The deadlines (``_arm``): the first byte's until the headers came, then the idle gap
        # and the total; one timer for all of them.
        self._first_byte = 0.0
        self._headers_by = 0.0
        self._idle = 0.0
        self._deadline = 0.0
        self._last_read = 0.0
        self._timed_out: str | None = None
        self._total = 0.0
        self._watchdog: asyncio.TimerHandle | None = None

    # fed by the connection

    def _headers_done(self) -> None:
        for name, value in self._raw_headers:
            lowered = name.lower()
            if lowered == b"content-type":
                self.is_event_stream = value.startswith(b"text/event-stream")
        self._framed = _is_framed(self._raw_headers)
        self._last_read = self._loop.time()  # the idle gap is counted from here
        self._wake_headers(None)

    def _feed(self, body: bytes) -> None:
        self._chunks.append(body)
        self._buffered += len(body)
        if self._buffered > HIGH_WATER and not self._paused:
            transport = self._connection.transport
            if transport is not None:
                transport.pause_reading()
                self._paused = True
        self._wake_body()

    def _complete(self) -> None:
        self._done = True
        self._wake_body()

    def _connection_lost(self) -> None:
        if self._done:
            return
        if self._headers_waiter is None and not self._framed:
            self._complete()  # a body delimited by the connection's close has ended
            return
        self._error(
            UpstreamError("The upstream connection failed mid-response: closed.")
            if self._headers_waiter is None
            else UpstreamError("The upstream closed the connection before answering.")
        )

    def _error(self, err: UpstreamError) -> None:
        if self._failure is None and not self._done:
            self._failure = err
        self._wake_headers(err)
        self._wake_body()

    def _wake_headers(self, err: BaseException | None) -> None:
        waiter, self._headers_waiter = self._headers_waiter, None
        if waiter is not None and not waiter.done():
            if err is None:
                waiter.set_result(None)
            else:
                waiter.set_exception(err)

    def _wake_body(self) -> None:
        waiter, self._body_waiter = self._body_waiter, None
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    # deadlines

    def _arm(self, timeouts: Timeouts, started: float, first_byte: float) -> None:
        """One timer for every deadline of the exchange, from before the request is sent (an
        ``asyncio.timeout`` around the wait for the headers cost a context, a cancellation and
        a second timer on every request). It is set for the earliest any deadline can come (the
        idle gap counts from the headers, which come after ``started``) and, when it fires
        before the deadline that applies then, set again for it: an answer shorter than the idle
        gap costs one timer, set and cancelled."""
        self._idle, self._total = timeouts.idle, timeouts.total
        self._deadline = started + timeouts.total
        self._first_byte = first_byte
        self._headers_by = min(started + first_byte, self._deadline)
        self._set_watchdog(min(self._headers_by, started + self._idle))

    def _set_watchdog(self, at: float) -> None:
        self._watchdog = self._loop.call_at(at, self._check)

    def _next_expiry(self) -> float:
        if self._headers_waiter is not None:
            return self._headers_by
        return min(self._last_read + self._idle, self._deadline)

    def _check(self) -> None:
        now = self._loop.time()
        expiry = self._next_expiry()
        if now < expiry:
            self._set_watchdog(expiry)
            return
        self._watchdog = None
        if self._headers_waiter is not None:
            self._timed_out = f"The upstream did not answer within {self._first_byte:g}s."
            self._wake_headers(UpstreamTimeout(self._timed_out))
        elif now < self._deadline:
            self._timed_out = f"The upstream sent nothing for {self._idle:g}s."
        else:
            self._timed_out = f"The upstream did not finish within {self._total:g}s."
        self._connection.close()
        self._wake_body()

    def _stop_watchdog(self) -> None:
        if self._watchdog is not None:
            self._watchdog.cancel()
            self._watchdog = None

    # UpstreamResponse

    def relay_headers(self) -> list[tuple[bytes, bytes]]:
        return relayable(self._raw_headers)

    async def chunks(self) -> AsyncIterator[bytes]:
        while True:
            if self._chunks:
                # Everything that arrived, at once: the parser hands over each chunk of a
                # chunked body separately, and a stream's events often come several to a read.
                chunks = self._chunks
                chunk = chunks.popleft() if len(chunks) == 1 else b"".join(chunks)
                chunks.clear()
                self._buffered = 0
                if self._paused:
                    self._paused = False
                    transport = self._connection.transport
                    if transport is not None and not self._connection.closed:
                        transport.resume_reading()
                self._last_read = self._loop.time()
                yield chunk
                continue
            if self._timed_out is not None:
                self._stop_watchdog()
                raise UpstreamTimeout(self._timed_out)
            if self._failure is not None:
                self._stop_watchdog()
                raise self._failure
            if self._done:
                self._stop_watchdog()
                return
            waiter = self._loop.create_future()
            self._body_waiter = waiter
            await waiter

    async def read(self) -> bytes:
        parts = [chunk async for chunk in self.chunks()]
        return b"".join(parts)

    def abort(self) -> None:
        self._stop_watchdog()
        if not self._released:
            self._released = True
            self._connection.close()
            self._connection.pool._done_with(self._connection, reuse=False)

    def release(self) -> None:
        self._stop_watchdog()
        if not self._released:
            self._released = True
            reuse = self._done and self._keep_alive and not self._chunks and self._failure is None
            self._connection.pool._done_with(self._connection, reuse=reuse)


def _is_framed(headers: list[tuple[bytes, bytes]]) -> bool:
    for name, value in headers:
        lowered = name.lower()
        if lowered == b"content-length" or (
            lowered == b"transfer-encoding" and b"chunked" in value.lower()
        ):
            return True
    return False


class Http1Upstream:
    """One upstream pool's connections: at most ``max_connections`` open, idle ones per host."""

    def __init__(self, config: UpstreamSettings, clock: Reading = time.monotonic) -> None:
        self.timeouts = config.timeouts
        self.limit = config.max_connections
        self._clock = clock
        self._idle: dict[tuple[str, int, bool], list[_Connection]] = {}
        self._open = 0  # connections open or being opened
        self._waiters: deque[asyncio.Future[None]] = deque()
        self._closing = False
        self._tls: ssl.SSLContext | None = None

    async def send(self, url: str, headers: Headers, body: bytes) -> Http1Response:
        where = target(url)
        return await self._exchange(where.key, _request_bytes(where.head, headers, body))

    async def probe(self, url: str, timeout_s: float) -> str | None:
        where = target(url)
        try:
            async with asyncio.timeout(timeout_s):
                response = await self._exchange(
                    where.key, _request_bytes(where.get_head, (), b""), probe=True
                )
                try:
                    await response.read()
                finally:
                    response.release()
        except TimeoutError:
            return "timeout"
        except (UpstreamError, UpstreamTimeout) as err:
            return type(err).__name__
        return None if response.status < 300 else f"status {response.status}"

    async def get(self, url: str, max_bytes: int) -> tuple[int, bytes]:
        """``GET url``: its status and body, for reading a small document (an engine's
        ``/metrics``); a body past ``max_bytes`` raises UpstreamError. The caller bounds the
        time (as for :meth:`probe`, the first byte's deadline is the total's)."""
        where = target(url)
        response = await self._exchange(
            where.key, _request_bytes(where.get_head, (), b""), probe=True
        )
        body = bytearray()
        read = False
        try:
            async for chunk in response.chunks():
                body += chunk
                if len(body) > max_bytes:
                    raise UpstreamError(f"The body is over {max_bytes} bytes.")
            read = True
        finally:
            if read:
                response.release()
            else:
                response.abort()
        return response.status, bytes(body)

    async def _exchange(
        self, key: tuple[str, int, bool], request: bytes, probe: bool = False
    ) -> Http1Response:
        loop = asyncio.get_running_loop()
        started = loop.time()
        timeouts = self.timeouts
        connection = await self._connection(key, loop)
        response = Http1Response(connection, loop)
        waiter = response._headers_waiter
        assert waiter is not None
        # A probe's caller has its own deadline: the first byte's is then the total.
        response._arm(timeouts, started, timeouts.total if probe else timeouts.first_byte)
        try:
            connection.start(response, request)
            await waiter  # raises the first byte's UpstreamTimeout when the watchdog fires
        except BaseException:
            response.abort()
            raise
        return response

    async def _connection(
        self, key: tuple[str, int, bool], loop: asyncio.AbstractEventLoop
    ) -> _Connection:
        """An idle connection to ``key`` if one is fresh, else a new one once the pool is under
        its limit (closing an idle connection of another host to get there if need be)."""
        while True:
            idle = self._idle.get(key)
            while idle:
                connection = idle.pop()  # the most recently used: the likeliest to be warm
                if not connection.closed and self._clock() - connection.idle_since < KEEPALIVE_S:
                    return connection
                connection.close()
                self._release_slot()
            if self._closing:
                raise UpstreamConnectError(
                    "Could not connect to the upstream: the gateway is stopping."
                )
            if self._open < self.limit:
                break
            if self._close_one_idle():
                continue
            waiter = loop.create_future()
            self._waiters.append(waiter)
            try:
                await waiter
            except BaseException:
                if waiter.done() and not waiter.cancelled():
                    self._wake_one()  # pass on the turn this waiter was given
                raise
        self._open += 1
        try:
            return await self._open_connection(key, loop)
        except BaseException:
            self._release_slot()
            raise

    async def _open_connection(
        self, key: tuple[str, int, bool], loop: asyncio.AbstractEventLoop
    ) -> _Connection:
        host, port, tls = key
        connection = _Connection(self, key)
        try:
            async with asyncio.timeout(self.timeouts.connect):
                await loop.create_connection(
                    lambda: connection,
                    host,
                    port,
                    ssl=self._tls_context() if tls else None,
                    server_hostname=host if tls else None,
                )
        except TimeoutError:
            raise UpstreamConnectError(
                f"Could not connect to the upstream within {self.timeouts.connect:g}s."
            ) from None
        except OSError as err:
            reason = err.strerror or type(err).__name__
            raise UpstreamConnectError(f"Could not connect to the upstream: {reason}.") from None
        return connection

    def _tls_context(self) -> ssl.SSLContext:
        if self._tls is None:
            self._tls = ssl.create_default_context()
        return self._tls

    def _done_with(self, connection: _Connection, *, reuse: bool) -> None:
        connection.response = None
        if reuse and not connection.closed and not self._closing:
            connection.idle_since = self._clock()
            self._idle.setdefault(connection.key, []).append(connection)
            self._wake_one()
            return
        connection.close()
        self._release_slot()

    def _forget(self, connection: _Connection) -> None:
        """The peer closed an idle connection: drop it from the idle list and free its slot."""
        idle = self._idle.get(connection.key)
        if idle and connection in idle:
            idle.remove(connection)
            self._release_slot()

    def _close_one_idle(self) -> bool:
        for connections in self._idle.values():
            if connections:
                connections.pop(0).close()
                self._release_slot()
                return True
        return False

    def _release_slot(self) -> None:
        self._open -= 1
        self._wake_one()

    def _wake_one(self) -> None:
        while self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():
                waiter.set_result(None)
                return

    async def aclose(self) -> None:
        self._closing = True
        for connections in self._idle.values():
            for connection in connections:
                connection.close()
        self._idle.clear()
        self._open = 0
