"""The server's own caps: requests served at once, and bodies still arriving, answered before any
request stage runs.

Pure ASGI, just inside the request-id layer (so a refusal carries the request's ids, is counted in
``gateway_overload_refusals_total{reason}`` and gets its access-log line) and outside everything
else: a refused request costs a counter check and a small answer built by the one error tree.
The probes and ``/metrics`` stay outside the caps, so an overloaded replica is neither restarted
by its liveness probe nor hidden from its scraper.

A request takes a serving slot only once its body is in. A body complete when the request
starts (a normal request: the whole body came with the headers) takes none of the upload caps
either; a body still arriving is an upload, at most ``max_uploads`` at once and
``max_uploads_per_client`` from one client address, and is read here before the request is
served. How slow an upload may be is the edge protocol's part (``server.min_body_rate``,
gateway/server/protocol.py): so slow uploads never starve the requests being served::

    app = InFlightLimit(app, limit=1024, max_uploads=256, max_uploads_per_client=16, metrics=m)
"""

from __future__ import annotations

from collections.abc import Callable

from starlette.types import ASGIApp

from gateway.asgi import Message, Receive, Scope, Send, send_response
from gateway.errors import GatewayError, Overloaded, TooManyUploads
from gateway.metrics import GatewayMetrics

EXEMPT = frozenset(("/healthz", "/readyz", "/metrics"))
REFUSAL_KEY = "gateway.refusal"
"""The code of a refusal made here, in the scope, for the access log (no outcome is built)."""
# The response ends the connection: a refused upload's unread body would otherwise keep it open.
_CLOSE = (b"connection", b"close")


class InFlightLimit:
    def __init__(
        self,
        app: ASGIApp,
        *,
        limit: int,
        max_uploads: int = 256,
        max_uploads_per_client: int = 16,
        max_body_bytes: int = 4 * 1024 * 1024,
        metrics: GatewayMetrics | None = None,
    ) -> None:
        self.app = app
        self.limit = limit
        self.max_body_bytes = max_body_bytes
        self.max_uploads = max_uploads
        self.max_uploads_per_client = max_uploads_per_client
        self.in_flight = 0
        self.uploads = 0
        self.uploads_by_client: dict[str, int] = {}
        """Bodies arriving per client address; an address leaves when its last upload ends."""
        self._count = _refusal_counter(metrics)
        if metrics is not None:
            metrics.uploads_in_progress.set_function(lambda: self.uploads)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["path"] in EXEMPT:
            await self.app(scope, receive, send)
            return
        first = await receive()
        if first.get("more_body", False):
            body = await self._upload(scope, first, receive, send)
            if body is None:
                return
        else:
            body = [first]
        if self.in_flight >= self.limit:
            err = Overloaded("The gateway is serving too many requests; retry shortly.")
            await self._refuse(scope, send, err, "in_flight", close=False)
            return
        self.in_flight += 1
        try:
            await self.app(scope, _Replay(body, receive), send)
        finally:
            self.in_flight -= 1

    async def _upload(
        self, scope: Scope, first: Message, receive: Receive, send: Send
    ) -> list[Message] | None:
        """Read the rest of a body still arriving, under the upload caps; None if refused."""
        client = scope.get("client")
        address = client[0] if client else ""
        mine = self.uploads_by_client.get(address, 0)
        if mine >= self.max_uploads_per_client:
            err: GatewayError = TooManyUploads("Too many uploads from this address; retry shortly.")
            await self._refuse(scope, send, err, "client_uploads", close=True)
            return None
        if self.uploads >= self.max_uploads:
            err = Overloaded("The gateway is receiving too many uploads; retry shortly.")
            await self._refuse(scope, send, err, "uploads", close=True)
            return None
        self.uploads += 1
        self.uploads_by_client[address] = mine + 1
        try:
            return await _rest_of_body(first, receive, self.max_body_bytes)
        finally:
            self.uploads -= 1
            left = self.uploads_by_client[address] - 1
            if left:
                self.uploads_by_client[address] = left
            else:
                del self.uploads_by_client[address]

    async def _refuse(
        self, scope: Scope, send: Send, err: GatewayError, reason: str, *, close: bool
    ) -> None:
        self._count(reason)
        scope[REFUSAL_KEY] = err.code
        headers = [(b"retry-after", b"1"), *([_CLOSE] if close else [])]
        await send_response(send, err.status, err.body(), extra_headers=headers)


async def _rest_of_body(first: Message, receive: Receive, limit: int) -> list[Message]:
    """The body's messages up to its last (or the disconnect that ends it), as they came; past
    ``limit`` bytes the rest is left unread, and the handler refuses it as too large (413)."""
    messages, size = [first], len(first.get("body", b""))
    while size <= limit and messages[-1].get("more_body", False):
        message = await receive()
        messages.append(message)
        if message["type"] != "http.request":
            break
        size += len(message.get("body", b""))
    return messages


class _Replay:
    """``receive`` for the app: the messages read already, then the connection's own. A plain
    object rather than a closure over an iterator: it is made for every request."""

    __slots__ = ("messages", "receive")

    def __init__(self, messages: list[Message], receive: Receive) -> None:
        self.messages, self.receive = messages, receive

    async def __call__(self) -> Message:
        messages = self.messages
        if messages:
            return messages.pop(0)
        return await self.receive()


def _refusal_counter(metrics: GatewayMetrics | None) -> Callable[[str], None]:
    if metrics is None:
        return lambda reason: None
    counter = metrics.overload_refusals
    children = {r: counter.labels(r) for r in ("in_flight", "uploads", "client_uploads")}
    return lambda reason: children[reason].inc()
