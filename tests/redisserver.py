"""Start a real ``redis-server`` on a free loopback port for tests, and stop it by its pid.

    with start_redis() as server:
        client = redis.Redis.from_url(server.url)

No persistence (``--save '' --appendonly no``); needs Debian's ``redis-server`` package.
"""

from __future__ import annotations

import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class RedisServer:
    def __init__(self, proc: subprocess.Popen[bytes], port: int) -> None:
        self.proc = proc
        self.port = port
        self.url = f"redis://127.0.0.1:{port}/0"

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)


def redis_available() -> bool:
    return shutil.which("redis-server") is not None


def spawn_redis(timeout: float = 10.0, port: int | None = None) -> RedisServer:
    """A running server on a free port (or ``port``); the caller must call ``.stop()``."""
    port = port or _free_port()
    proc = subprocess.Popen(
        [
            "redis-server",
            "--port", str(port),
            "--bind", "127.0.0.1",
            "--save", "",
            "--appendonly", "no",
            "--protected-mode", "yes",
            "--loglevel", "warning",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )  # fmt: skip
    server = RedisServer(proc, port)
    deadline = time.monotonic() + timeout
    while not _answers_ping(port):
        if proc.poll() is not None or time.monotonic() > deadline:
            server.stop()
            raise RuntimeError(f"redis-server did not start on port {port}")
        time.sleep(0.02)
    return server


def _answers_ping(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5) as s:
            s.sendall(b"PING\r\n")
            return s.recv(16).startswith(b"+PONG")
    except OSError:
        return False


@contextmanager
def start_redis() -> Iterator[RedisServer]:
    server = spawn_redis()
    try:
        yield server
    finally:
        server.stop()
