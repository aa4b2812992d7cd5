"""Legitimate clients around the upload caps, against a real gateway process: a body that trails
its headers by a moment is no upload, and a refused upload's client reads its answer.

Many clients behind one address (a NAT, an ingress, a load tester) have bodies that come in
pieces: on a real network a body past one segment (about 1.4 KB) can reach the gateway a segment
at a time, and on a loaded machine the pieces come apart. Counted as uploads from their first
piece, more than ``max_uploads_per_client`` of them were refused with 429. A refused client that
was still writing its body (most HTTP clients write it all before they read) met a closed
socket, whose kernel answers with a reset: the client saw the reset, not the 429.
"""

from __future__ import annotations

import http.client
import select
import socket
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import orjson

from tests.gatewayproc import GatewayProcess, start_gateway
from tests.integration.proxy.conftest import MODEL, gateway_config, sim  # noqa: F401
from tests.integration.server.test_slow_uploads import HEAD, config_with, metric, wait_for
from tests.simproc import SimProcess

CLIENTS = 32
"""Twice the default ``max_uploads_per_client`` (16), all from 127.0.0.1."""
PAUSE = 0.05
"""How long after its first piece a body's rest comes: a segment's lag on a loaded machine,
well inside the default ``upload_grace`` (0.25 s)."""


def chat_body(i: int) -> bytes:
    messages = [{"role": "user", "content": f"request {i}: " + "words " * 300}]  # ~1.9 KB
    return orjson.dumps({"model": MODEL, "messages": messages, "max_tokens": 4})


def read_to_end(sock: socket.socket) -> bytes:
    """Everything until the gateway closes; a reset is raised, not taken for an end."""
    chunks = []
    while chunk := sock.recv(65536):
        chunks.append(chunk)
    return b"".join(chunks)


def test_bodies_that_trail_their_headers_are_served_past_the_per_client_cap(
    sim: SimProcess,  # noqa: F811
    tmp_path: Path,
) -> None:
    config = gateway_config(sim.url)
    config["server"] = {"access_log": False}  # the upload caps at their defaults
    start = threading.Barrier(CLIENTS)

    def client(gateway: GatewayProcess, i: int) -> bytes:
        body = chat_body(i)
        head = (
            b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n"
            b"connection: close\r\ncontent-length: %d\r\n\r\n" % len(body)
        )
        with socket.create_connection(("127.0.0.1", gateway.port), timeout=60) as sock:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            start.wait(timeout=60)  # all at once, so that every body trails at the same time
            sock.sendall(head + body[:1000])  # the headers and the body's first segment
            time.sleep(PAUSE)
            sock.sendall(body[1000:])
            return read_to_end(sock)

    with start_gateway(config, tmp_path) as gateway, ThreadPoolExecutor(CLIENTS) as pool:
        answers = list(pool.map(lambda i: client(gateway, i), range(CLIENTS)))
    statuses = [a.split(b"\r\n", 1)[0] for a in answers]
    assert statuses == [b"HTTP/1.1 200 OK"] * CLIENTS, [a[-200:] for a in answers]


def test_a_refused_upload_still_writing_reads_its_429(
    sim: SimProcess,  # noqa: F811
    tmp_path: Path,
) -> None:
    held = 2
    config = config_with(sim.url, max_uploads_per_client=held, body_grace=100)
    with start_gateway(config, tmp_path) as gateway:
        uploads = [socket.create_connection(("127.0.0.1", gateway.port)) for _ in range(held)]
        try:
            for sock in uploads:
                sock.sendall(HEAD + b'{"model": ')
            wait_for(
                lambda: metric(gateway, "gateway_uploads_in_progress") == held,
                "the held uploads are never counted as uploads",
            )
            # The standard library's client writes the whole body before it reads the answer,
            # and reports a write that fails: what a reset would do to it shows.
            conn = http.client.HTTPConnection("127.0.0.1", gateway.port, timeout=30)

            def body() -> Iterator[bytes]:
                yield b'{"model": '
                # The third upload from this address is refused once its grace is past: the
                # client goes on writing after the answer has come.
                assert conn.sock is not None
                readable, _, _ = select.select([conn.sock], [], [], 30)
                assert readable, "the upload past the cap is never answered"
                for _ in range(25):
                    yield b" " * 3999

            headers = {"content-type": "application/json", "content-length": "100000"}
            conn.request("POST", "/v1/chat/completions", body=body(), headers=headers)
            response = conn.getresponse()
            answer = response.read()
            conn.close()
        finally:
            for sock in uploads:
                sock.close()
    assert response.status == 429, answer[:200]
    assert response.getheader("connection") == "close"
    error = orjson.loads(answer)["error"]
    assert (error["type"], error["code"]) == ("requests", "too_many_uploads")
