"""The ASGI adapter: an HTTP request made into the pipeline's request value and sink.

Everything HTTP stays here: the scope's arrival, principal, headers and client address become an
:class:`Incoming`; ``receive`` reads the body (bounded, its content type checked) and tells when
the client hung up; ``send`` carries the answer. The pipeline (gateway/proxy/pipeline.py) never
sees any of them.
"""

from __future__ import annotations

from collections.abc import Awaitable

from gateway.asgi import Message, Receive, Scope, Send
from gateway.proxy.incoming import Incoming
from gateway.proxy.pipeline import Pipeline
from gateway.proxy.sink import Header
from gateway.wire.outcome import PRINCIPAL_KEY, arrival_of, outcome_slot
from gateway.wire.request import Operation, read_body


class ProxyEndpoint:
    """A pure-ASGI endpoint for one OpenAI operation (chat, completions, embeddings, responses)."""

    __slots__ = ("operation", "pipeline")

    def __init__(self, operation: Operation, pipeline: Pipeline) -> None:
        self.operation = operation
        self.pipeline = pipeline

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        async def body(limit: int) -> bytes:
            return await read_body(scope, receive, limit)

        client = scope.get("client")
        incoming = Incoming(
            self.operation,
            arrival_of(scope),
            scope.get(PRINCIPAL_KEY),
            body,
            scope["headers"],
            client[0] if client else None,
            scope["method"],
            scope["path"],
        )
        # The outcome goes to the scope's slot, where the access log and server span read it.
        await self.pipeline.serve(incoming, AsgiSink(send, receive), outcome_slot(scope))


class AsgiSink:
    """The answer as ASGI messages; ``departed`` waits for ``http.disconnect``."""

    __slots__ = ("_receive", "_send")

    def __init__(self, send: Send, receive: Receive) -> None:
        self._send = send
        self._receive = receive

    def start(self, status: int, headers: list[Header]) -> Awaitable[None]:
        return self._send({"type": "http.response.start", "status": status, "headers": headers})

    def send(self, chunk: bytes) -> Awaitable[None]:
        return self._send({"type": "http.response.body", "body": chunk, "more_body": True})

    def end(self, chunk: bytes = b"") -> Awaitable[None]:
        return self._send({"type": "http.response.body", "body": chunk, "more_body": False})

    async def departed(self) -> None:
        receive = self._receive
        message: Message = await receive()
        while message["type"] != "http.disconnect":
            message = await receive()
