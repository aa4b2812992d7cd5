"""The server's own caps: requests served at once, and bodies still arriving, answered before any
request stage runs.

Pure ASGI, just inside the request-id layer (so a refusal carries the request's ids, is counted in
``gateway_overload_refusals_total{reason}`` and gets its access-log line) and outside everything
else: a refused request costs a counter check and a small answer built by the one error tree.
The probes and ``/metrics`` stay outside the caps, so an overloaded replica is neither restarted
by its liveness probe nor hidden from its scraper.

A request takes a serving slot only once its body is in. A body complete when the request
starts (the whole body came with the headers) takes none of the upload caps either, and neither
does one that trails its headers by a moment: the rest is read for ``upload_grace`` seconds
before anything is counted (a loaded client, or a NAT's many clients on a real network, whose
bodies come a segment after their headers). A body still arriving after that is an upload, at
most ``max_uploads`` at once and ``max_uploads_per_client`` from one client address, read here
before the request is served. How slow an upload may be is the edge protocol's part
(``server.min_body_rate``, gateway/server/protocol.py), and so is closing a refused one gently
enough that its client reads the answer: so slow uploads never starve the requests served::

    app = InFlightLimit(app, limit=1024, max_uploads=256, max_uploads_per_client=16, metrics=m)
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from starlette.types import ASGIApp

from gateway.asgi import Message, Receive, Scope, Send, send_response
from gateway.errors import GatewayError, Overloaded, TooManyUploads
from gateway.metrics import GatewayMetrics
from gateway.server.refusals import REASONS

EXEMPT = frozenset(("/healthz", "/readyz", "/metrics"))
REFUSAL_KEY = "gateway.refusal"
"""The code of a refusal made here, in the scope, for the access log (no outcome is built)."""
# The response ends the connection: a refused upload's unread body would otherwise keep it open.
_CLOSE = (b"connection", b"close")
# After the grace, one more short wait before a body is judged late: an event loop may run an
# expired timer before it reads its sockets (uvloop does), so after a stall of the loop the bytes
# that came in time are read first.
_SETTLE = 0.001


class InFlightLimit:
    def __init__(
        self,
        app: ASGIApp,
        *,
        limit: int,
        max_uploads: int = 256,
        max_uploads_per_client: int = 16,
        upload_grace: float = 0.25,
        max_body_bytes: int = 4 * 1024 * 1024,
        metrics: GatewayMetrics | None = None,
    ) -> None:
        self.app = app
        self.limit = limit
        self.upload_grace = upload_grace
        self.max_body_bytes = max_body_bytes
        self.max_uploads = max_uploads
        self.max_uploads_per_client = max_uploads_per_client
        self.in_flight = 0
        self.uploads = 0
        self.uploads_by_client: dict[str, int] = {}
        """Bodies arriving per client address; an address leaves when its last upload ends."""
        self._count = refusal_counter(metrics)
        if metrics is not None:
            metrics.uploads_in_progress.set_function(lambda: self.uploads)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["path"] in EXEMPT:
            await self.app(scope, receive, send)
            return
        first = await receive()
        if first.get("more_body", False):
            body = await self._rest_of_body(scope, first, receive, send)
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

    async def _rest_of_body(
        self, scope: Scope, first: Message, receive: Receive, send: Send
    ) -> list[Message] | None:
        """The messages of a body that did not come whole with its headers: uncounted for the
        grace period, then, still arriving, an upload under the caps; None if refused."""
        messages = [first]
        reading = asyncio.ensure_future(_read_body(messages, receive, self.max_body_bytes))
        try:
            if await _done_within(reading, self.upload_grace):
                reading.result()  # what receive raised, if it did
                return messages
            client = scope.get("client")
            address = client[0] if client else ""
            refusal = self._upload_refusal(address)
            if refusal is not None:
                reading.cancel()
                await self._refuse(scope, send, *refusal, close=True)
                return None
            self.uploads += 1
            self.uploads_by_client[address] = self.uploads_by_client.get(address, 0) + 1
            try:
                await reading
            finally:
                self._upload_ended(address)
            return messages
        finally:
            reading.cancel()  # nothing when it is done; when this request is cancelled, it too

    def _upload_refusal(self, address: str) -> tuple[GatewayError, str] | None:
        if self.uploads_by_client.get(address, 0) >= self.max_uploads_per_client:
            message = "Too many uploads from this address; retry shortly."
            return TooManyUploads(message), "client_uploads"
        if self.uploads >= self.max_uploads:
            message = "The gateway is receiving too many uploads; retry shortly."
            return Overloaded(message), "uploads"
        return None

    def _upload_ended(self, address: str) -> None:
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


async def _done_within(task: asyncio.Future[None], seconds: float) -> bool:
    """Whether ``task`` is done within ``seconds`` (plus the settling wait); never cancels it."""
    await asyncio.wait((task,), timeout=seconds)
    if not task.done():
        await asyncio.wait((task,), timeout=_SETTLE)
    return task.done()


async def _read_body(messages: list[Message], receive: Receive, limit: int) -> None:
    """Append the body's messages to ``messages`` up to its last (or the disconnect that ends
    it), as they came; past ``limit`` bytes the rest is left unread, and the handler refuses it
    as too large (413)."""
    size = sum(len(m.get("body", b"")) for m in messages)
    while size <= limit and messages[-1].get("more_body", False):
        message = await receive()
        messages.append(message)
        if message["type"] != "http.request":
            break
        size += len(message.get("body", b""))


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


def refusal_counter(metrics: GatewayMetrics | None) -> Callable[[str], None]:
    """Count a refusal of the server's caps under its reason (one of ``REASONS``)."""
    if metrics is None:
        return lambda reason: None
    counter = metrics.overload_refusals
    children = {r: counter.labels(r) for r in REASONS}
    return lambda reason: children[reason].inc()
