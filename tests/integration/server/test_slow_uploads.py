"""Slow uploads against a real gateway process, at a small scale: bodies still arriving take no
serving slot, are bounded per client address, and are closed when slower than the minimum rate.

The attack of issue 26 (5,000 connections dribbling bodies starved every normal request) with
small caps: 4 serving slots and 10 uploads. loadtests/bench_hostile.py runs it at full scale.
"""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.gatewayproc import GatewayProcess, start_gateway
from tests.integration.proxy.conftest import MODEL, gateway_config, sim  # noqa: F401
from tests.simproc import SimProcess

UPLOADS = 10
HEAD = (
    b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n"
    b"content-length: 100000\r\n\r\n"
)


def config_with(sim_url: str, **server: Any) -> dict[str, Any]:
    config = gateway_config(sim_url)
    config["server"] = {
        "max_requests_in_flight": 4,
        "max_uploads": 100,
        "max_uploads_per_client": UPLOADS,
        "body_timeout": 120,
        "access_log": True,
        **server,
    }
    return config


@pytest.fixture(scope="module")
def gateway(sim: SimProcess, tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayProcess]:  # noqa: F811
    # A long grace period: the slow uploads stay for as long as the test needs them.
    config = config_with(sim.url, body_grace=100)
    with start_gateway(config, tmp_path_factory.mktemp("uploads")) as process:
        yield process


def connect(gateway: GatewayProcess) -> socket.socket:
    return socket.create_connection(("127.0.0.1", gateway.port), timeout=30)


def read_all(sock: socket.socket) -> bytes:
    chunks = []
    try:
        while chunk := sock.recv(65536):
            chunks.append(chunk)
    except ConnectionResetError:
        pass
    return b"".join(chunks)


def metric(gateway: GatewayProcess, line_start: str) -> float | None:
    for line in httpx.get(gateway.url + "/metrics", timeout=10).text.splitlines():
        if line.startswith(line_start + " "):
            return float(line.rsplit(" ", 1)[1])
    return None


def wait_for(check: object, what: str, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while not check():  # type: ignore[operator]
        assert time.monotonic() < deadline, what
        time.sleep(0.05)


def chat(gateway: GatewayProcess) -> httpx.Response:
    body = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}
    return httpx.post(gateway.base_url + "/chat/completions", json=body, timeout=30)


def test_slow_uploads_neither_starve_requests_nor_outnumber_their_caps(
    gateway: GatewayProcess,
) -> None:
    uploads = [connect(gateway) for _ in range(UPLOADS)]
    try:
        for sock in uploads:
            sock.sendall(HEAD + b'{"model": ')
        wait_for(
            lambda: metric(gateway, "gateway_uploads_in_progress") == UPLOADS,
            "the uploads are never counted as uploads",
        )
        # 10 bodies arriving, 4 serving slots: a normal request is still served.
        assert all(chat(gateway).status_code == 200 for _ in range(3))
        # One more upload from the same address is refused at once, and its connection closed.
        with connect(gateway) as extra:
            extra.sendall(HEAD + b'{"model": ')
            answer = read_all(extra)
        assert answer.startswith(b"HTTP/1.1 429 "), answer[:100]
        assert b'"code":"too_many_uploads"' in answer
    finally:
        for sock in uploads:
            sock.close()
    refused = 'gateway_overload_refusals_total{reason="client_uploads"}'
    assert metric(gateway, refused) == 1.0

    def refusals_logged() -> list[dict[str, Any]]:
        return [e for e in gateway.access_log() if e.get("error_code") == "too_many_uploads"]

    # The access log is written in batches (every 50 ms): wait for the refusal's line.
    wait_for(refusals_logged, "the refusal has no access-log line")
    logged = refusals_logged()
    assert [(e["status"], e["path"]) for e in logged] == [(429, "/v1/chat/completions")]


def test_an_upload_slower_than_the_minimum_rate_is_closed(
    sim: SimProcess,  # noqa: F811
    tmp_path: Path,
) -> None:
    config = config_with(sim.url, body_grace=1, min_body_rate=1000)
    with start_gateway(config, tmp_path) as gateway:
        with connect(gateway) as slow:
            slow.sendall(HEAD + b'{"model": ')  # then nothing: 10 bytes in, 100 KB promised
            answer = read_all(slow)  # the body deadline (120 s) is past the socket's timeout
        assert answer.startswith(b"HTTP/1.1 408 "), answer[:100]
        assert b'"code":"request_timeout"' in answer
        # 4 KB every 0.2 s for 2 s: past the 1 s grace period, at 20 times the minimum rate.
        content = "a" * 40_000
        body = b'{"model": "%s", "messages": [{"role": "user", "content": "%s"}]}' % (
            MODEL.encode(),
            content.encode(),
        )
        head = HEAD.replace(b"100000", str(len(body)).encode())
        with connect(gateway) as sock:
            sock.sendall(head)
            for start in range(0, len(body), 4000):
                sock.sendall(body[start : start + 4000])
                time.sleep(0.2)
            status_line = sock.recv(100).split(b"\r\n", 1)[0]
        assert status_line == b"HTTP/1.1 200 OK"
