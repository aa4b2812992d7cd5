"""The upstream HTTP client's interface: what the pipeline needs of a pool's client.

``gateway.upstream.http1.Http1Upstream`` implements it (chosen by measurement: README,
"Performance"); the seam tests give ``create_app`` a scripted one. Errors are the gateway's own,
so nothing above knows how the bytes travel::

    client = Http1Upstream(pool_config)
    response = await client.send(url, headers, body)   # returns at the response headers
    async for chunk in response.chunks(): ...          # idle and total deadlines enforced
    await client.aclose()
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from typing import Protocol

from gateway.errors import UpstreamError
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
