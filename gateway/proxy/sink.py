"""Where the pipeline writes its answer: a :class:`Sink`, whatever carries it to the client.

The relay (gateway/proxy/relay.py) knows nothing of HTTP: it starts the answer with a status and
headers, sends body chunks, and ends it. The ASGI endpoint's sink turns those into ASGI messages
(gateway/proxy/endpoint.py); a batch job's sink writes a line of its output file; a test's sink
collects them (tests/seam/test_pipeline.py)::

    await sink.start(200, [(b"content-type", b"text/event-stream")])
    await sink.send(b"data: {...}\\n\\n")          # more to come
    await sink.end(b"data: [DONE]\\n\\n")          # the last bytes (may be empty)

The methods return awaitables rather than being coroutine functions in the protocol, so that a
sink may hand back its transport's own awaitable (the ASGI sink returns ``send(...)`` itself:
no extra coroutine per streamed event).
"""

from __future__ import annotations

from collections.abc import Awaitable, Iterable
from typing import Protocol

from gateway.asgi import JSON

Header = tuple[bytes, bytes]


class Sink(Protocol):
    """The receiving end of one answer: ``start`` once, ``send`` any number of times, ``end``
    once. ``departed`` returns when the receiver has gone away (a client that hung up); a sink
    whose receiver cannot leave (a batch job's output) never returns from it."""

    def start(self, status: int, headers: list[Header]) -> Awaitable[None]: ...

    def send(self, chunk: bytes) -> Awaitable[None]: ...

    def end(self, chunk: bytes = b"") -> Awaitable[None]: ...

    def departed(self) -> Awaitable[None]: ...


async def send_whole(
    sink: Sink,
    status: int,
    body: bytes,
    content_type: bytes = JSON,
    extra_headers: Iterable[Header] = (),
) -> None:
    """A whole answer at once: its length known, one body chunk."""
    headers = [
        (b"content-type", content_type),
        (b"content-length", str(len(body)).encode()),
        *extra_headers,
    ]
    await sink.start(status, headers)
    await sink.end(body)
