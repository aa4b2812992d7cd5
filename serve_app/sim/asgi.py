"""Small pure-ASGI helpers: read a body, answer bytes, watch for the client leaving, abort.

The simulator is a bare ASGI callable (no framework) so that it stays much faster than the
gateway it is used to measure.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]

JSON = b"application/json"
EVENT_STREAM = b"text/event-stream"


class ClientGone(Exception):
    """The client disconnected while the request body was still being read."""


def header_dict(scope: Scope) -> dict[str, str]:
    """Request headers as a dict with lower-case names (the last value wins)."""
    return {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}


async def read_body(receive: Receive) -> bytes:
    """The whole request body; raises :class:`ClientGone` if the client leaves first."""
    message = await receive()
    if message["type"] == "http.disconnect":
        raise ClientGone
    body: bytes = message.get("body", b"")
    if not message.get("more_body", False):
        return body
    parts = [body]
    while message.get("more_body", False):
        message = await receive()
        if message["type"] == "http.disconnect":
            raise ClientGone
        parts.append(message.get("body", b""))
    return b"".join(parts)


async def send_bytes(send: Send, status: int, body: bytes, content_type: bytes = JSON) -> None:
    """A complete response with a ``content-length``."""
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [(b"content-type", content_type), (b"content-length", b"%d" % len(body))],
        }
    )
    await send({"type": "http.response.body", "body": body, "more_body": False})


async def start_stream(send: Send) -> None:
    """Headers of a chunked server-sent-event response."""
    await send(
        {
            "type": "http.response.start",
            "status": 200,
            "headers": [(b"content-type", EVENT_STREAM), (b"cache-control", b"no-cache")],
        }
    )


async def wait_disconnect(receive: Receive) -> None:
    """Return once the client has gone away (call after the body was read)."""
    while (await receive())["type"] != "http.disconnect":
        pass


async def abort_connection(send: Send, receive: Receive) -> None:
    """Drop the TCP connection at once, without finishing the response.

    ASGI has no message for this, so reach the server's transport through the bound ``send``
    (uvicorn's request cycle keeps it as ``.transport``): ``abort()`` closes the socket without
    flushing, and a chunked body stays unterminated. Then wait for the server to notice, so it
    does not try to answer with a 500 itself. A server without that attribute gets an
    exception instead, which uvicorn answers by closing the connection (a 500 before the start).
    """
    transport = getattr(getattr(send, "__self__", None), "transport", None)
    if transport is None:
        raise SimulatedAbort("x-sim-fail-after: the simulator aborted this connection")
    transport.abort()
    await wait_disconnect(receive)


class SimulatedAbort(Exception):
    """Raised to make the server drop a connection when its transport is out of reach."""
