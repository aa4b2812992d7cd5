"""pd-loadtest exits non-zero with a clear message when it cannot test a target at all."""

from __future__ import annotations

import os
import socket
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from tests.integration.loadtests.test_against_sim import run_tool


class _RefusesKeys(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        body = (
            b'{"error": {"message": "Invalid API key", "type": "invalid_request_error",'
            b' "code": "invalid_api_key"}}'
        )
        self.send_response(401)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def refusing_server() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _RefusesKeys)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/v1"
    server.shutdown()
    server.server_close()


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_unreachable_target_exits_3() -> None:
    url = f"http://127.0.0.1:{_closed_port()}/v1"
    done = run_tool("--target", url, "--model", "m", "--rate", "1", "--requests", "1")
    assert done.returncode == 3
    assert "unreachable" in done.stderr and url in done.stderr


def test_refused_key_exits_4(refusing_server: str) -> None:
    env = {**os.environ, "MY_KEY": "sk-wrong"}
    done = run_tool(
        "--target", f"name=gw,url={refusing_server},key_env=MY_KEY", "--model", "m",
        "--rate", "1", "--requests", "1",
        env=env,
    )  # fmt: skip
    assert done.returncode == 4
    assert "refused the API key (401" in done.stderr and "Invalid API key" in done.stderr


def test_bad_arguments_exit_2() -> None:
    done = run_tool("--target", "ftp://x", "--model", "m", "--rate", "1", "--requests", "1")
    assert done.returncode == 2
    assert "bad --target" in done.stderr
