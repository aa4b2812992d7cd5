"""The upstream HTTP/1.1 client against real loopback servers that answer as scripted: framing,
keep-alive and the pool's limit, deadlines, and every way an upstream can misbehave."""

from __future__ import annotations

import asyncio
import base64
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field

import pytest

from gateway.errors import UpstreamError, UpstreamTimeout
from gateway.upstream.client import UpstreamConnectError
from gateway.upstream.config import Timeouts
from gateway.upstream.http1 import HIGH_WATER, Http1Upstream

Reader, Writer = asyncio.StreamReader, asyncio.StreamWriter
Script = Callable[["Request", Writer], Awaitable[None]]

JSON_HEADERS = [(b"content-type", b"application/json")]


@dataclass
class Request:
    head: bytes
    body: bytes
    connection: int  # which connection, numbered from 1 in order of acceptance


@dataclass
class Server:
    url: str
    requests: list[Request] = field(default_factory=list)
    connections: int = 0
    open_now: int = 0
    most_open: int = 0


@dataclass
class Settings:
    timeouts: Timeouts = field(default_factory=Timeouts)
    max_connections: int = 100


@asynccontextmanager
async def scripted(script: Script) -> AsyncIterator[Server]:
    """A server that reads each request (head and content-length body) and runs ``script``."""
    state = Server("")

    async def serve(reader: Reader, writer: Writer) -> None:
        state.connections += 1
        number = state.connections
        state.open_now += 1
        state.most_open = max(state.most_open, state.open_now)
        try:
            while True:
                try:
                    head = await reader.readuntil(b"\r\n\r\n")
                except (asyncio.IncompleteReadError, ConnectionError):
                    return
                length = 0
                for line in head.split(b"\r\n"):
                    if line.lower().startswith(b"content-length:"):
                        length = int(line.split(b":")[1])
                request = Request(head, await reader.readexactly(length), number)
                state.requests.append(request)
                await script(request, writer)
                if writer.is_closing():
                    return
        finally:
            state.open_now -= 1
            writer.close()

    server = await asyncio.start_server(serve, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    state.url = f"http://127.0.0.1:{port}"
    try:
        yield state
    finally:
        server.close()
        await server.wait_closed()


def answer(status: int = 200, body: bytes = b"{}", extra: bytes = b"") -> bytes:
    return b"HTTP/1.1 %d OK\r\ncontent-type: application/json\r\ncontent-length: %d\r\n%s\r\n%s" % (
        status,
        len(body),
        extra,
        body,
    )


async def ok(request: Request, writer: Writer) -> None:
    writer.write(answer(body=b'{"n": %d}' % len(request.body)))


def client(**timeouts: float) -> Http1Upstream:
    return Http1Upstream(Settings(Timeouts(**timeouts)))


async def until(condition: Callable[[], bool], timeout: float = 10.0) -> None:
    """Wait for ``condition`` (a state the test's own server reports), not for a guessed time."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not condition():
        assert loop.time() < deadline, "condition not reached"
        await asyncio.sleep(0.005)


async def whole(upstream: Http1Upstream, url: str) -> tuple[int, bytes]:
    """One request read to its end, its connection given back: (status, body)."""
    response = await upstream.send(url, (), b"")
    body = await response.read()
    response.release()
    return response.status, body


async def test_keeps_the_connection_for_the_next_request_and_sends_the_body() -> None:
    async with scripted(ok) as server:
        upstream = client()
        for body in (b'{"a": 1}', b"[]"):
            response = await upstream.send(server.url + "/v1/chat", JSON_HEADERS, body)
            assert response.status == 200
            assert await response.read() == b'{"n": %d}' % len(body)
            response.release()
        await upstream.aclose()
    assert [r.connection for r in server.requests] == [1, 1]
    first = server.requests[0]
    assert first.head.startswith(b"POST /v1/chat HTTP/1.1\r\n")
    assert f"host: {server.url[7:]}".encode() in first.head
    assert b"content-type: application/json" in first.head
    assert first.body == b'{"a": 1}'


async def test_chunked_body_arrives_whole_and_in_order() -> None:
    events = [b"data: %d\n\n" % i for i in range(20)]

    async def chunked(request: Request, writer: Writer) -> None:
        writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n")
        writer.write(b"transfer-encoding: chunked\r\n\r\n")
        for event in events:
            writer.write(b"%x\r\n%s\r\n" % (len(event), event))
            await writer.drain()
        writer.write(b"0\r\n\r\n")

    async with scripted(chunked) as server:
        upstream = client()
        response = await upstream.send(server.url + "/s", (), b"")
        assert response.is_event_stream
        assert b"".join([c async for c in response.chunks()]) == b"".join(events)
        response.release()
        assert (await whole(upstream, server.url + "/s"))[0] == 200
        await upstream.aclose()
    assert server.connections == 1  # a complete chunked answer leaves the connection reusable


async def test_a_body_ended_by_closing_the_connection_is_complete_and_not_reused() -> None:
    async def close_delimited(request: Request, writer: Writer) -> None:
        writer.write(b"HTTP/1.1 200 OK\r\nconnection: close\r\n\r\nall of it")
        await writer.drain()
        writer.close()

    async with scripted(close_delimited) as server:
        upstream = client()
        for _ in range(2):
            assert await whole(upstream, server.url + "/") == (200, b"all of it")
        await upstream.aclose()
    assert server.connections == 2


async def test_never_more_connections_than_the_limit() -> None:
    async def slow(request: Request, writer: Writer) -> None:
        await asyncio.sleep(0.02)
        writer.write(answer())

    async with scripted(slow) as server:
        upstream = Http1Upstream(Settings(max_connections=2))

        async def one() -> int:
            status, _ = await whole(upstream, server.url + "/")
            return status

        assert await asyncio.gather(*(one() for _ in range(8))) == [200] * 8
        await upstream.aclose()
    assert server.most_open == 2 and server.connections == 2


async def test_waiting_for_a_connection_can_be_cancelled_without_losing_the_slot() -> None:
    release = asyncio.Event()

    async def held(request: Request, writer: Writer) -> None:
        await release.wait()
        writer.write(answer())

    async with scripted(held) as server:
        upstream = Http1Upstream(Settings(max_connections=1))
        first = asyncio.create_task(upstream.send(server.url + "/", (), b""))
        await until(lambda: len(server.requests) == 1)  # the only connection is taken
        waiting = asyncio.create_task(upstream.send(server.url + "/", (), b""))
        for _ in range(3):  # no I/O on its way: it waits for a connection within these turns
            await asyncio.sleep(0)
        waiting.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiting
        release.set()
        response = await first
        await response.read()
        response.release()
        assert (await whole(upstream, server.url + "/"))[0] == 200
        await upstream.aclose()


async def test_an_aborted_response_drops_its_connection() -> None:
    async with scripted(ok) as server:
        upstream = client()
        response = await upstream.send(server.url + "/", (), b"")
        response.abort()
        assert (await whole(upstream, server.url + "/"))[0] == 200
        await upstream.aclose()
    assert [r.connection for r in server.requests] == [1, 2]


async def test_refused_connection_is_a_connect_error() -> None:
    async with scripted(ok) as server:
        url = server.url
    upstream = client()
    with pytest.raises(UpstreamConnectError, match="Could not connect"):
        await upstream.send(url + "/", (), b"")
    await upstream.aclose()


async def test_no_answer_within_first_byte_is_a_timeout() -> None:
    async def silent(request: Request, writer: Writer) -> None:
        await asyncio.sleep(1)

    async with scripted(silent) as server:
        upstream = client(first_byte=0.05)
        with pytest.raises(UpstreamTimeout, match=r"did not answer within 0\.05s"):
            await upstream.send(server.url + "/", (), b"")
        await upstream.aclose()


async def test_a_stalled_body_is_an_idle_timeout() -> None:
    async def stalls(request: Request, writer: Writer) -> None:
        writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: 100\r\n\r\nsome")
        await asyncio.sleep(1)

    async with scripted(stalls) as server:
        upstream = client(idle=0.05)
        response = await upstream.send(server.url + "/", (), b"")
        with pytest.raises(UpstreamTimeout, match=r"sent nothing for 0\.05s"):
            await response.read()
        response.abort()
        await upstream.aclose()


async def test_the_idle_gap_counts_from_the_headers_and_the_total_bounds_the_rest() -> None:
    """One watchdog serves every deadline: answers slower than the idle gap, with chunks
    closer together than it, pass; the total deadline still ends a stream that never stalls."""

    async def slow_then_steady(request: Request, writer: Writer) -> None:
        await asyncio.sleep(0.6)  # past the idle gap, within the first byte's deadline
        writer.write(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n")
        for _ in range(6 if request.body == b"end" else 100):
            await asyncio.sleep(0.05)
            if writer.is_closing():  # the client gave up (the total deadline): stop writing
                return
            writer.write(b"1\r\nx\r\n")
        writer.write(b"0\r\n\r\n")

    async with scripted(slow_then_steady) as server:
        upstream = client(first_byte=3.0, idle=0.5, total=2.0)
        response = await upstream.send(server.url + "/", (), b"end")
        assert await response.read() == b"x" * 6
        response.release()
        response = await upstream.send(server.url + "/", (), b"forever")
        with pytest.raises(UpstreamTimeout, match=r"did not finish within 2s"):
            await response.read()
        response.abort()
        await upstream.aclose()


async def test_closed_before_answering_and_mid_body_are_upstream_errors() -> None:
    async def hangs_up(request: Request, writer: Writer) -> None:
        writer.close()

    async def cut(request: Request, writer: Writer) -> None:
        writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: 100\r\n\r\nsome")
        await writer.drain()
        writer.close()

    async with scripted(hangs_up) as server:
        upstream = client()
        with pytest.raises(UpstreamError, match="closed the connection before answering"):
            await upstream.send(server.url + "/", (), b"")
        await upstream.aclose()
    async with scripted(cut) as server:
        upstream = client()
        response = await upstream.send(server.url + "/", (), b"")
        with pytest.raises(UpstreamError, match="failed mid-response"):
            await response.read()
        response.abort()
        await upstream.aclose()


async def test_malformed_answer_is_an_upstream_error() -> None:
    async def garbage(request: Request, writer: Writer) -> None:
        writer.write(b"NOT HTTP AT ALL\r\n\r\n")

    async with scripted(garbage) as server:
        upstream = client()
        with pytest.raises(UpstreamError, match="malformed"):
            await upstream.send(server.url + "/", (), b"")
        await upstream.aclose()


async def test_unasked_bytes_on_an_idle_connection_retire_it() -> None:
    released = asyncio.Event()

    async def extra(request: Request, writer: Writer) -> None:
        writer.write(answer())
        await writer.drain()
        if request.connection == 1:
            await released.wait()  # the client has put the connection back in its pool
            writer.write(b"HTTP/1.1 200 OK\r\n")  # an answer to nothing

    async with scripted(extra) as server:
        upstream = client()
        assert (await whole(upstream, server.url + "/"))[0] == 200
        released.set()
        await until(lambda: server.open_now == 0)  # the client dropped that connection
        assert (await whole(upstream, server.url + "/"))[0] == 200
        await upstream.aclose()
    assert [r.connection for r in server.requests] == [1, 2]


async def test_a_line_break_in_a_header_is_refused_before_anything_is_sent() -> None:
    async with scripted(ok) as server:
        upstream = client()
        with pytest.raises(UpstreamError, match="line break"):
            await upstream.send(server.url + "/", [(b"x-a", b"1\r\nx-injected: 2")], b"")
        await upstream.aclose()
    assert server.requests == []


async def test_credentials_in_the_url_become_basic_authorization() -> None:
    async with scripted(ok) as server:
        upstream = client()
        url = server.url.replace("http://", "http://user:p%40ss@") + "/v1"
        assert (await whole(upstream, url))[0] == 200
        await upstream.aclose()
    head = server.requests[0].head
    assert b"authorization: Basic " + base64.b64encode(b"user:p@ss") in head
    assert b"host: 127.0.0.1:" in head and b"user" not in head.split(b"authorization")[0]


async def test_relayed_headers_leave_out_hop_by_hop_and_cookies() -> None:
    async def cookie(request: Request, writer: Writer) -> None:
        writer.write(answer(extra=b"set-cookie: a=b\r\nx-kept: yes\r\nconnection: x-kept\r\n"))

    async with scripted(cookie) as server:
        upstream = client()
        response = await upstream.send(server.url + "/", (), b"")
        await response.read()
        response.release()
        await upstream.aclose()
    assert response.relay_headers() == [(b"content-type", b"application/json")]


async def test_probe_reports_status_and_timeout() -> None:
    async def by_path(request: Request, writer: Writer) -> None:
        if request.head.startswith(b"GET /slow"):
            await asyncio.sleep(1)
        status = 503 if request.head.startswith(b"GET /down") else 200
        writer.write(answer(status))

    async with scripted(by_path) as server:
        upstream = client()
        assert await upstream.probe(server.url + "/health", 1) is None
        assert await upstream.probe(server.url + "/down", 1) == "status 503"
        assert await upstream.probe(server.url + "/slow", 0.05) == "timeout"
        await upstream.aclose()
    assert server.requests[0].head.startswith(b"GET /health HTTP/1.1\r\n")


async def test_a_slow_reader_pauses_the_upstream_and_still_gets_every_byte() -> None:
    """Unread bytes stay bounded (reading pauses past HIGH_WATER): no chunk handed over is much
    larger than that, though the upstream sent 4 MiB at once."""
    big = b"x" * (4 * 1024 * 1024)

    async def large(request: Request, writer: Writer) -> None:
        writer.write(answer(body=big))
        await writer.drain()

    async with scripted(large) as server:
        upstream = client()
        response = await upstream.send(server.url + "/", (), b"")
        received, largest = 0, 0
        async for chunk in response.chunks():
            received += len(chunk)
            largest = max(largest, len(chunk))
            await asyncio.sleep(0.002)  # a client slower than loopback
        assert received == len(big)
        assert largest <= HIGH_WATER + 256 * 1024
        response.release()
        await upstream.aclose()


async def test_endless_headers_from_an_upstream_are_cut_at_the_bound() -> None:
    async def endless(request: Request, writer: Writer) -> None:
        writer.write(b"HTTP/1.1 200 OK\r\n")
        for i in range(10_000):  # 10k headers of 100 bytes: 1 MB, past the 64 KiB bound
            writer.write(b"x-h%d: %s\r\n" % (i, b"v" * 90))
        await writer.drain()

    async with scripted(endless) as server:
        upstream = client()
        with pytest.raises(UpstreamError, match="headers passed 65536 bytes"):
            await upstream.send(server.url + "/", (), b"")
        await upstream.aclose()
