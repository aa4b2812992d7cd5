"""The upstream HTTP client, behind one small interface of ours.

aiohttp's client serves it: measured in ``loadtests/``, it keeps a pass-through proxy about 3x
faster than httpx over the httpx-aiohttp transport and 15x faster than plain httpx at concurrency
64 (httpcore scans its pool on every request). Lower-level errors are translated into gateway
errors here, once, so nothing above this module knows about aiohttp::

    client = AiohttpUpstream(pool_config)
    response = await client.send(url, headers, body)   # returns at the response headers
    async for chunk in response.chunks(): ...          # idle and total deadlines enforced
    await client.aclose()
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Sequence
from typing import Protocol

import aiohttp

from gateway.errors import UpstreamError, UpstreamTimeout
from gateway.upstream.config import Timeouts

Headers = Sequence[tuple[bytes, bytes]]

# Never relayed to the client: hop-by-hop headers (RFC 9110 7.6.1, plus any the upstream's own
# ``Connection`` header names), those the gateway sets itself, and cookies: one upstream session
# serves every tenant, so a cookie set upstream is nobody's to receive.
_NOT_RELAYED = frozenset(
    {
        b"connection",
        b"keep-alive",
        b"transfer-encoding",
        b"content-length",
        b"date",
        b"server",
        b"x-request-id",
        b"upgrade",
        b"proxy-connection",
        b"proxy-authenticate",
        b"te",
        b"trailer",
        b"set-cookie",
        b"set-cookie2",
    }
)


def relayable(raw_headers: Sequence[tuple[bytes, bytes]]) -> list[tuple[bytes, bytes]]:
    """The upstream's response headers (lower-cased) that may pass to the client."""
    dropped = set(_NOT_RELAYED)
    for name, value in raw_headers:
        if name.lower() == b"connection":
            dropped.update(token.strip().lower() for token in value.split(b","))
    return [(k.lower(), v) for k, v in raw_headers if k.lower() not in dropped]


class UpstreamConnectError(UpstreamError):
    """The replica could not be reached at all: safe to retry elsewhere, and a sign it is down."""


class UpstreamResponse(Protocol):
    status: int
    is_event_stream: bool

    def relay_headers(self) -> list[tuple[bytes, bytes]]:
        """The upstream's response headers that may pass to the client."""

    def chunks(self) -> AsyncIterator[bytes]:
        """Body chunks as they arrive; raises UpstreamTimeout or UpstreamError."""

    async def read(self) -> bytes:
        """The whole body, under the same deadlines."""

    def abort(self) -> None:
        """Drop the connection now (the client left, or a deadline passed)."""

    def release(self) -> None:
        """Return a fully read connection to the pool."""


class UpstreamClient(Protocol):
    async def send(self, url: str, headers: Headers, body: bytes) -> UpstreamResponse: ...

    async def probe(self, url: str, timeout_s: float) -> str | None:
        """None if ``GET url`` answers 2xx within ``timeout_s`` seconds, else a short reason."""

    async def aclose(self) -> None: ...


class UpstreamSettings(Protocol):
    """What the client needs of a pool's config (``gateway.routing.config.PoolConfig``)."""

    @property
    def timeouts(self) -> Timeouts: ...

    @property
    def max_connections(self) -> int: ...


class AiohttpUpstream:
    """One pooled aiohttp session for one upstream pool."""

    def __init__(self, config: UpstreamSettings) -> None:
        self.timeouts = config.timeouts
        connector = aiohttp.TCPConnector(
            limit=config.max_connections, limit_per_host=0, keepalive_timeout=30.0
        )
        self.session = aiohttp.ClientSession(
            connector=connector,
            auto_decompress=False,
            skip_auto_headers=("User-Agent", "Accept-Encoding"),
            # One session serves every tenant: a cookie set by an upstream answer must never ride
            # along on another caller's request (and not keeping a jar saves work per request).
            cookie_jar=aiohttp.DummyCookieJar(),
            timeout=aiohttp.ClientTimeout(total=None, sock_connect=config.timeouts.connect),
        )

    async def send(self, url: str, headers: Headers, body: bytes) -> _AiohttpResponse:
        loop = asyncio.get_running_loop()
        started = loop.time()
        deadline = started + self.timeouts.total
        try:
            async with asyncio.timeout_at(min(started + self.timeouts.first_byte, deadline)):
                response = await self.session.post(url, data=body, headers=_str_headers(headers))
        except TimeoutError:
            raise UpstreamTimeout(
                f"The upstream did not answer within {self.timeouts.first_byte:g}s."
            ) from None
        except aiohttp.ClientConnectorError as err:
            raise UpstreamConnectError(
                f"Could not connect to the upstream: {err.strerror}."
            ) from None
        except (aiohttp.ClientError, OSError) as err:
            raise UpstreamError(
                f"The upstream failed before answering: {type(err).__name__}."
            ) from None
        return _AiohttpResponse(response, loop, self.timeouts, deadline)

    async def probe(self, url: str, timeout_s: float) -> str | None:
        try:
            async with self.session.get(
                url, timeout=aiohttp.ClientTimeout(total=timeout_s)
            ) as response:
                await response.read()
                return None if response.status < 300 else f"status {response.status}"
        except TimeoutError:
            return "timeout"
        except (aiohttp.ClientError, OSError) as err:
            return type(err).__name__

    async def aclose(self) -> None:
        await self.session.close()


def _str_headers(headers: Headers) -> dict[str, str]:
    return {k.decode("latin-1"): v.decode("latin-1") for k, v in headers}


class _AiohttpResponse:
    """An upstream response whose body reads obey the idle and total deadlines.

    The deadlines are enforced by one watchdog timer per response rather than a timeout object per
    read: a read only records the time; when the timer fires it re-arms itself for the next possible
    expiry, or aborts the connection, which wakes the pending read.
    """

    def __init__(
        self,
        response: aiohttp.ClientResponse,
        loop: asyncio.AbstractEventLoop,
        timeouts: Timeouts,
        deadline: float,
    ) -> None:
        self._response = response
        self._loop = loop
        self._idle = timeouts.idle
        self._total = timeouts.total
        self._deadline = deadline
        self._last_read = loop.time()
        self._timed_out: str | None = None
        self._watchdog: asyncio.TimerHandle | None = loop.call_at(self._next_expiry(), self._check)
        self.status = response.status
        content_type = response.headers.get("content-type", "")
        self.is_event_stream = content_type.startswith("text/event-stream")

    def _next_expiry(self) -> float:
        return min(self._last_read + self._idle, self._deadline)

    def _check(self) -> None:
        now = self._loop.time()
        expiry = self._next_expiry()
        if now < expiry:
            self._watchdog = self._loop.call_at(expiry, self._check)
            return
        self._watchdog = None
        self._timed_out = (
            f"The upstream sent nothing for {self._idle:g}s."
            if now < self._deadline
            else f"The upstream did not finish within {self._total:g}s."
        )
        self._response.close()

    def relay_headers(self) -> list[tuple[bytes, bytes]]:
        return relayable(self._response.raw_headers)

    async def chunks(self) -> AsyncIterator[bytes]:
        content = self._response.content
        while True:
            try:
                chunk = await content.readany()
            except (TimeoutError, aiohttp.ClientError, OSError) as err:
                raise self._read_error(err) from None
            if not chunk:
                if self._timed_out is not None:  # the watchdog closed it: not a clean end
                    raise UpstreamTimeout(self._timed_out)
                self._stop_watchdog()
                return
            self._last_read = self._loop.time()
            yield chunk

    async def read(self) -> bytes:
        parts = [chunk async for chunk in self.chunks()]
        return b"".join(parts)

    def _read_error(self, err: BaseException) -> UpstreamError | UpstreamTimeout:
        self._stop_watchdog()
        if self._timed_out is not None:
            return UpstreamTimeout(self._timed_out)
        return UpstreamError(f"The upstream connection failed mid-response: {type(err).__name__}.")

    def _stop_watchdog(self) -> None:
        if self._watchdog is not None:
            self._watchdog.cancel()
            self._watchdog = None

    def abort(self) -> None:
        self._stop_watchdog()
        self._response.close()

    def release(self) -> None:
        self._stop_watchdog()
        self._response.release()
