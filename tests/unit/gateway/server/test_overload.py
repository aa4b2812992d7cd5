"""The upload grace of the server's caps, over raw ASGI with a body that arrives when the test
says: a body whose rest comes within the grace is a normal request, one still arriving after
it is an upload under the caps; and bytes that came in time are read before the grace is
judged, even when the event loop was busy as the grace ran out."""

from __future__ import annotations

import asyncio
import socket
import time
from collections.abc import Callable
from typing import Any

import orjson
import pytest
import uvloop

from gateway.asgi import Message, Receive, Scope, Send, send_response
from gateway.server.overload import InFlightLimit, _done_within

SCOPE: dict[str, Any] = {
    "type": "http",
    "method": "POST",
    "path": "/v1/chat/completions",
    "headers": [],
    "client": ("203.0.113.7", 40000),
}


class Echo:
    """The app inside the caps: answers 200 with the body it read."""

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        body = b""
        while True:
            message = await receive()
            body += message.get("body", b"")
            if not message.get("more_body", False):
                break
        await send_response(send, 200, body)


class Client:
    """One request: its body's first piece, then the rest once ``arrive`` is set."""

    def __init__(self) -> None:
        self.arrive = asyncio.Event()
        self.receives = 0
        self.sent: list[Message] = []

    async def receive(self) -> Message:
        self.receives += 1
        if self.receives == 1:
            return {"type": "http.request", "body": b"first ", "more_body": True}
        await self.arrive.wait()
        return {"type": "http.request", "body": b"rest", "more_body": False}

    async def send(self, message: Message) -> None:
        self.sent.append(message)

    def status(self) -> int:
        return int(self.sent[0]["status"])

    def body(self) -> bytes:
        return b"".join(m.get("body", b"") for m in self.sent[1:])


async def until(check: Callable[[], bool]) -> None:
    for _ in range(10_000):
        if check():
            return
        await asyncio.sleep(0)
    raise AssertionError("never")


async def test_a_body_whose_rest_comes_within_the_grace_is_no_upload() -> None:
    limit = InFlightLimit(Echo(), limit=8, max_uploads_per_client=1, upload_grace=60)
    clients = [Client() for _ in range(3)]  # three from one address, the cap one upload
    calls = [asyncio.create_task(limit(SCOPE, c.receive, c.send)) for c in clients]
    await until(lambda: all(c.receives == 2 for c in clients))  # each waits for its rest
    assert limit.uploads == 0
    for client in clients:
        client.arrive.set()
    await asyncio.gather(*calls)
    assert [(c.status(), c.body()) for c in clients] == [(200, b"first rest")] * 3


async def test_a_body_still_arriving_after_the_grace_is_an_upload_under_the_caps() -> None:
    limit = InFlightLimit(Echo(), limit=8, max_uploads_per_client=1, upload_grace=0)
    slow, refused = Client(), Client()
    held = asyncio.create_task(limit(SCOPE, slow.receive, slow.send))
    await until(lambda: limit.uploads == 1)
    await limit(SCOPE, refused.receive, refused.send)
    assert refused.status() == 429
    assert (b"connection", b"close") in refused.sent[0]["headers"]
    assert orjson.loads(refused.body())["error"]["code"] == "too_many_uploads"
    slow.arrive.set()
    await held
    assert (slow.status(), slow.body(), limit.uploads) == (200, b"first rest", 0)
    assert limit.uploads_by_client == {}


@pytest.mark.parametrize(
    "new_loop", [asyncio.new_event_loop, uvloop.new_event_loop], ids=["asyncio", "uvloop"]
)
def test_bytes_that_came_while_the_loop_was_busy_count_as_in_time(
    new_loop: Callable[[], asyncio.AbstractEventLoop],
) -> None:
    """The bytes reach the socket before the grace ends, but the loop is busy with another
    connection's callback until past it; uvloop then runs the expired timer before it reads the
    socket again. The body must still count as in time."""
    grace = 0.05
    body_in, body_out = socket.socketpair()
    busy_in, busy_out = socket.socketpair()
    for sock in (body_in, busy_in):
        sock.setblocking(False)

    def busy() -> None:  # another connection's callback, slow while this body's bytes come
        busy_in.recv(10)
        body_out.send(b"rest")
        time.sleep(grace * 4)

    async def main() -> bool:
        loop = asyncio.get_running_loop()

        async def read() -> None:
            await loop.sock_recv(body_in, 10)

        reading = asyncio.ensure_future(read())
        loop.add_reader(busy_in, busy)
        loop.call_later(grace / 5, busy_out.send, b"go")
        try:
            return await _done_within(reading, grace)
        finally:
            loop.remove_reader(busy_in)

    loop = new_loop()
    try:
        assert loop.run_until_complete(main())
    finally:
        loop.close()
        for sock in (body_in, body_out, busy_in, busy_out):
            sock.close()
