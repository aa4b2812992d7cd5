"""The edge limits against a real gateway process over real sockets: what only a process shows."""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.gatewayproc import GatewayProcess, start_gateway
from tests.integration.proxy.conftest import MODEL, gateway_config, sim  # noqa: F401
from tests.simproc import SimProcess

HEADER_TIMEOUT = 1.0
BODY_TIMEOUT = 1.0


def rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise AssertionError("no VmRSS")


def open_files(pid: int) -> int:
    return len(list(Path(f"/proc/{pid}/fd").iterdir()))


@pytest.fixture(scope="module")
def gateway(sim: SimProcess, tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayProcess]:  # noqa: F811
    config = gateway_config(sim.url)
    config["server"] = {
        "header_timeout": HEADER_TIMEOUT,
        "body_timeout": BODY_TIMEOUT,
        "max_connections": 3000,
    }
    with start_gateway(config, tmp_path_factory.mktemp("edge")) as process:
        yield process


def connect(gateway: GatewayProcess) -> socket.socket:
    return socket.create_connection(("127.0.0.1", gateway.port), timeout=10)


def read_all(sock: socket.socket) -> bytes:
    chunks = []
    try:
        while chunk := sock.recv(65536):
            chunks.append(chunk)
    except ConnectionResetError:  # a timeout is not swallowed: the gateway did not close it
        pass
    return b"".join(chunks)


def chat(gateway: GatewayProcess) -> httpx.Response:
    body = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}
    return httpx.post(gateway.base_url + "/chat/completions", json=body, timeout=10)


def test_too_many_headers_is_431(gateway: GatewayProcess) -> None:
    with connect(gateway) as sock:
        headers = b"".join(b"x-h%d: v\r\n" % i for i in range(150))
        sock.sendall(b"GET /healthz HTTP/1.1\r\nhost: x\r\n" + headers + b"\r\n")
        answer = read_all(sock)
    assert answer.startswith(b"HTTP/1.1 431 "), answer[:100]
    assert b'"code":"request_header_fields_too_large"' in answer


def test_header_flood_is_refused_and_memory_stays_bounded(gateway: GatewayProcess) -> None:
    before = rss_kib(gateway.proc.pid)
    header = b"x-flood: " + b"a" * 8192 + b"\r\n"
    sent = 0
    with connect(gateway) as sock:
        sock.sendall(b"GET /healthz HTTP/1.1\r\nhost: x\r\n")
        try:
            for _ in range(20_000):  # 164 MB if all were taken
                sock.sendall(header)
                sent += 1
        except (BrokenPipeError, ConnectionResetError):
            pass
        answer = read_all(sock)
    assert sent < 20_000 or answer.startswith(b"HTTP/1.1 431 ")
    assert answer == b"" or answer.startswith(b"HTTP/1.1 431 "), answer[:100]
    assert rss_kib(gateway.proc.pid) - before < 10 * 1024
    assert chat(gateway).status_code == 200


def test_slowloris_connections_are_closed_and_normal_requests_answered(
    gateway: GatewayProcess,
) -> None:
    files_before = open_files(gateway.proc.pid)
    slow = [connect(gateway) for _ in range(1000)]
    try:
        for sock in slow:
            sock.sendall(b"GET /healthz HTTP/1.1\r\nx-slow: ")
        started = time.monotonic()
        response = chat(gateway)  # answered while 1,000 slow senders are open
        assert response.status_code == 200
        assert time.monotonic() - started < HEADER_TIMEOUT + 5
        for sock in slow:  # each one closed by the gateway after the header deadline
            sock.settimeout(HEADER_TIMEOUT + 10)
            assert read_all(sock).startswith(b"HTTP/1.1 408 ")
    finally:
        for sock in slow:
            sock.close()
    deadline = time.monotonic() + 5
    while open_files(gateway.proc.pid) > files_before + 10 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert open_files(gateway.proc.pid) <= files_before + 10


def test_idle_connection_without_a_byte_is_closed_silently(gateway: GatewayProcess) -> None:
    with connect(gateway) as sock:
        sock.settimeout(HEADER_TIMEOUT + 10)
        assert read_all(sock) == b""


def test_dribbled_body_gets_408(gateway: GatewayProcess) -> None:
    with connect(gateway) as sock:
        sock.sendall(
            b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n"
            b'content-length: 100000\r\n\r\n{"model": '
        )
        started = time.monotonic()
        sock.settimeout(BODY_TIMEOUT + 10)
        answer = read_all(sock)
    assert answer.startswith(b"HTTP/1.1 408 "), answer[:100]
    assert time.monotonic() - started >= BODY_TIMEOUT * 0.9
    assert b'"code":"request_timeout"' in answer


def test_keep_alive_connection_serves_many_requests(gateway: GatewayProcess) -> None:
    with httpx.Client(base_url=gateway.url) as client:
        for _ in range(20):
            assert client.get("/healthz").status_code == 200


def test_connection_cap_evicts_the_longest_idle(
    sim: SimProcess,  # noqa: F811
    tmp_path: Path,
) -> None:
    config = gateway_config(sim.url)
    config["server"] = {"max_connections": 20}
    with start_gateway(config, tmp_path) as gateway:
        idle = [connect(gateway) for _ in range(40)]
        for sock in idle[::2]:  # half of them have begun their headers: evictable all the same
            sock.sendall(b"GET /healthz HTTP/1.1\r\nx-slow: ")
        try:
            assert chat(gateway).status_code == 200  # room made by closing idle ones
            closed = 0
            for sock in idle[:20]:
                sock.settimeout(30)  # closed at once; the margin is for a loaded machine
                closed += read_all(sock) == b""
            assert closed == 20
        finally:
            for sock in idle:
                sock.close()


def test_a_connection_past_the_cap_is_refused_counted_and_logged(
    sim: SimProcess,  # noqa: F811
    tmp_path: Path,
) -> None:
    config = gateway_config(sim.url)
    config["server"] = {"max_connections": 4, "access_log": True}
    with start_gateway(config, tmp_path) as gateway:
        files_before = open_files(gateway.proc.pid)
        busy = [connect(gateway) for _ in range(4)]
        try:
            for sock in busy:  # a request in progress on each: none may be closed for room
                sock.sendall(
                    b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\n"
                    b'content-length: 100000\r\n\r\n{"model": '
                )
            with connect(gateway) as extra:
                extra.settimeout(30)
                answer = read_all(extra)
        finally:
            for sock in busy:
                sock.close()
        # The busy ones closed on the gateway's side too, so /metrics finds room.
        deadline = time.monotonic() + 30
        while open_files(gateway.proc.pid) > files_before and time.monotonic() < deadline:
            time.sleep(0.05)
        metrics = httpx.get(gateway.url + "/metrics", timeout=10).text
        refused = 'gateway_overload_refusals_total{reason="connections"} '
        counted = [line for line in metrics.splitlines() if line.startswith(refused)]

        def logged() -> list[dict[str, object]]:
            entries = gateway.access_log()
            return [e for e in entries if e.get("error_code") == "server_overloaded"]

        deadline = time.monotonic() + 30
        while not logged() and time.monotonic() < deadline:
            time.sleep(0.05)  # the access log is written in batches
        lines = logged()
    assert answer.startswith(b"HTTP/1.1 503 "), answer[:100]
    assert b'"code":"server_overloaded"' in answer
    assert counted == [refused + "1.0"]
    assert [(e["status"], e["method"], e["path"]) for e in lines] == [(503, None, None)]
