"""The edge protocol's cost per connection and per write.

A closed connection's protocol is freed by reference counting alone: the served process runs the
cyclic collector rarely (gateway/server/memory.py), so a reference cycle per connection would make
memory grow with the connections served. And a request read whole writes its answer straight to
the transport: the wrapper that makes a close gentle while a body arrives would otherwise cost
every event of every stream a few calls more."""

from __future__ import annotations

import asyncio
import gc
import weakref
from collections.abc import Awaitable, Callable, Iterator
from typing import Any, ClassVar

import pytest
import uvicorn

from gateway.asgi import Receive, Scope, Send, send_response
from gateway.config import ServerConfig
from gateway.server.protocol import EdgeHttpToolsProtocol
from gateway.server.uvicorn_config import EdgeUvicornConfig


async def refuse(scope: Scope, receive: Receive, send: Send) -> None:
    """Answers before the body is in, and closes: the path that lingers."""
    if scope["type"] != "http":
        return
    await send_response(send, 429, b"{}", extra_headers=[(b"connection", b"close")])


@pytest.fixture
def no_cyclic_collector() -> Iterator[None]:
    gc.collect()
    gc.disable()
    yield
    gc.enable()


class TrackedProtocol(EdgeHttpToolsProtocol):
    """The edge protocol, each instance remembered weakly: alive only while something holds it.
    (Scanning ``gc.get_objects()`` instead touches every object in the process, and some, such
    as torch's deprecated module attributes, warn when merely asked for their class.)"""

    alive: ClassVar[weakref.WeakSet[EdgeHttpToolsProtocol]] = weakref.WeakSet()
    made: ClassVar[int] = 0

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        TrackedProtocol.alive.add(self)
        TrackedProtocol.made += 1


async def start(
    app: Callable[[Scope, Receive, Send], Awaitable[None]],
) -> tuple[uvicorn.Server, asyncio.Task[None], int]:
    config = EdgeUvicornConfig(
        app,
        host="127.0.0.1",
        port=0,
        http=TrackedProtocol,
        lifespan="off",
        log_level="warning",
        limits=ServerConfig(),
        max_connections=100,
    )
    server = uvicorn.Server(config)
    serving = asyncio.create_task(server.serve())
    while not server.started:
        await asyncio.sleep(0.01)
    return server, serving, server.servers[0].sockets[0].getsockname()[1]


@pytest.mark.usefixtures("no_cyclic_collector")
async def test_closed_connections_leave_no_protocol_behind() -> None:
    made_before = TrackedProtocol.made
    server, serving, port = await start(refuse)
    for _ in range(20):
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(b"POST / HTTP/1.1\r\nhost: x\r\ncontent-length: 1000\r\n\r\n{")
        assert (await reader.read(100)).startswith(b"HTTP/1.1 429 ")
        writer.close()
        await writer.wait_closed()
    for _ in range(1000):  # until the gateway's side has seen every end
        if not server.server_state.connections:
            break
        await asyncio.sleep(0.01)
    server.should_exit = True
    await serving
    assert TrackedProtocol.made - made_before == 20
    assert len(TrackedProtocol.alive) == 0


async def test_only_a_body_still_arriving_writes_through_the_wrapper() -> None:
    straight: list[bool] = []
    server: uvicorn.Server | None = None

    async def answer(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return
        if scope["path"] == "/whole":
            await receive()  # the body, whole
        assert server is not None
        (protocol,) = server.server_state.connections
        assert isinstance(protocol, EdgeHttpToolsProtocol) and protocol.cycle is not None
        straight.append(protocol.cycle.transport is protocol.transport)
        await send_response(send, 200, b"{}", extra_headers=[(b"connection", b"close")])

    server, serving, port = await start(answer)
    try:
        for path, body in (("/whole", b"{}"), ("/arriving", b"{")):
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            head = b"POST %s HTTP/1.1\r\nhost: x\r\ncontent-length: 2\r\n\r\n" % path.encode()
            writer.write(head + body)
            assert (await reader.read(100)).startswith(b"HTTP/1.1 200 ")
            writer.close()
            await writer.wait_closed()
            for _ in range(1000):  # one connection at a time: the next request finds only its own
                if not server.server_state.connections:
                    break
                await asyncio.sleep(0.01)
    finally:
        server.should_exit = True
        await serving
    assert straight == [True, False]
