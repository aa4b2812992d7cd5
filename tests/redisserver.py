"""Start a real ``redis-server`` on a unix socket in a temp folder for tests, stop it by its pid.

    with start_redis() as server:
        client = redis.Redis.from_url(server.url)   # unix:///tmp/redis-.../redis.sock?db=0

A socket in a folder of its own needs no port: nothing to probe, nothing another process can
take between the probe and the bind. No persistence (``--save '' --appendonly no``); needs
Debian's ``redis-server`` package.
"""

from __future__ import annotations

import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

SOCKET_NAME = "redis.sock"


def socket_url(folder: Path) -> str:
    """The URL of a server listening in ``folder`` (whether or not one is running yet)."""
    return f"unix://{folder / SOCKET_NAME}?db=0"


class RedisServer:
    def __init__(self, proc: subprocess.Popen[bytes], folder: Path, owns_folder: bool) -> None:
        self.proc = proc
        self.folder = folder
        self.socket = folder / SOCKET_NAME
        self.url = socket_url(folder)
        self._owns_folder = owns_folder

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        if self._owns_folder:
            shutil.rmtree(self.folder, ignore_errors=True)


def redis_available() -> bool:
    return shutil.which("redis-server") is not None


def spawn_redis(timeout: float = 10.0, folder: Path | None = None) -> RedisServer:
    """A running server on a socket in a new temp folder (or in ``folder``, which the caller
    owns: a URL handed out before the server starts); the caller must call ``.stop()``."""
    owns_folder = folder is None
    folder = Path(tempfile.mkdtemp(prefix="redis-")) if folder is None else folder
    proc = subprocess.Popen(
        [
            "redis-server",
            "--port", "0",  # no TCP listener at all
            "--unixsocket", str(folder / SOCKET_NAME),
            "--unixsocketperm", "700",
            "--save", "",
            "--appendonly", "no",
            "--loglevel", "warning",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )  # fmt: skip
    server = RedisServer(proc, folder, owns_folder)
    deadline = time.monotonic() + timeout
    while not _answers_ping(server.socket):
        if proc.poll() is not None or time.monotonic() > deadline:
            server.stop()
            raise RuntimeError(f"redis-server did not start on {server.socket}")
        time.sleep(0.02)
    return server


def _answers_ping(path: Path) -> bool:
    try:
        with socket.socket(socket.AF_UNIX) as s:
            s.settimeout(0.5)
            s.connect(str(path))
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
