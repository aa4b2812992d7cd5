"""Small helpers for speaking raw ASGI on the hot path (no Request/Response objects)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from starlette.types import Message, Receive, Scope, Send

__all__ = [
    "Headers",
    "Message",
    "Receive",
    "Scope",
    "Send",
    "find_header",
    "header",
    "send_response",
]

JSON = b"application/json"

Headers = Sequence[tuple[bytes, bytes]]
"""Request headers as ASGI gives them: (lower-case name, value) pairs, in order."""


def find_header(headers: Headers, name: bytes) -> bytes | None:
    """The first value of a header; ``name`` in lower case."""
    for key, value in headers:
        if key == name:
            return value
    return None


def header(scope: Scope, name: bytes) -> bytes | None:
    """The first value of a request header; ``name`` in lower case."""
    return find_header(scope["headers"], name)


async def send_response(
    send: Send,
    status: int,
    body: bytes,
    content_type: bytes = JSON,
    extra_headers: Iterable[tuple[bytes, bytes]] = (),
) -> None:
    headers = [
        (b"content-type", content_type),
        (b"content-length", str(len(body)).encode()),
        *extra_headers,
    ]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})
