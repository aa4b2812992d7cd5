"""Start the simulated vLLM server (``python -m serve_app.sim``) as a real process for tests.

    with start_sim("--no-delay", "--model", "m") as sim:
        client = openai.OpenAI(base_url=sim.base_url, api_key="x")
        ...
        sim.requests()  # what the simulator saw, oldest first
        sim.reset()

The simulator binds port 0 and announces ``SIM_LISTENING http://127.0.0.1:PORT`` on stdout;
it is stopped by its pid when the block ends.
"""

from __future__ import annotations

import os
import selectors
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import httpx

READY_PREFIX = "SIM_LISTENING "


class SimProcess:
    """A running simulator process: its URLs, its request records, and how to stop it."""

    def __init__(self, proc: subprocess.Popen[bytes], url: str) -> None:
        self.proc = proc
        self.pid = proc.pid
        self.url = url
        self.base_url = url + "/v1"
        self.port = int(url.rsplit(":", 1)[1])

    def requests(self) -> list[dict[str, Any]]:
        """The simulator's request records (see serve_app/sim/records.py), oldest first."""
        response = httpx.get(self.url + "/sim/requests", timeout=10)
        response.raise_for_status()
        records: list[dict[str, Any]] = response.json()
        return records

    def wait_for_requests(
        self, count: int, *, timeout: float = 60.0, done: bool = False
    ) -> list[dict[str, Any]]:
        """Poll until at least ``count`` records exist (and, with ``done``, all are settled).

        A record is settled when it completed or was cancelled. The deadline is generous: it
        costs nothing when the records come, and on a loaded machine 20 streams started by as
        many threads took more than 5 s to reach the simulator.
        """
        deadline = time.monotonic() + timeout
        while True:
            records = self.requests()
            settled = all(r["completed_at"] or r["cancelled"] for r in records)
            if len(records) >= count and (settled or not done):
                return records
            if time.monotonic() > deadline:
                raise TimeoutError(f"simulator saw {len(records)} requests, wanted {count}")
            time.sleep(0.01)

    def reset(self) -> None:
        httpx.post(self.url + "/sim/reset", timeout=10).raise_for_status()

    def stop(self, timeout: float = 5.0) -> int:
        """SIGTERM, then SIGKILL if it does not exit in ``timeout`` seconds; the exit code.

        A graceful stop returns -15: uvicorn re-raises the signal after its shutdown.
        """
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            code = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            code = self.proc.wait(5)
        if self.proc.stdout is not None:
            self.proc.stdout.close()
        return code


def _read_ready_line(proc: subprocess.Popen[bytes], timeout: float) -> str:
    assert proc.stdout is not None
    deadline = time.monotonic() + timeout
    buffer = b""
    with selectors.DefaultSelector() as selector:
        selector.register(proc.stdout, selectors.EVENT_READ)
        while b"\n" not in buffer:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError(f"simulator did not announce itself within {timeout}s")
            if not selector.select(left):
                continue
            chunk = os.read(proc.stdout.fileno(), 4096)
            if not chunk:
                raise RuntimeError(f"simulator exited with {proc.wait(5)} before listening")
            buffer += chunk
    line = buffer.split(b"\n", 1)[0].decode()
    if not line.startswith(READY_PREFIX):
        raise RuntimeError(f"unexpected first line from the simulator: {line!r}")
    return line[len(READY_PREFIX) :].strip()


def spawn_sim(*args: str, timeout: float = 20.0) -> SimProcess:
    """Start a simulator on a free loopback port; the caller must call ``.stop()``."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "serve_app.sim", "--host", "127.0.0.1", "--port", "0", *args],
        stdout=subprocess.PIPE,
    )
    try:
        url = _read_ready_line(proc, timeout)
    except BaseException:
        proc.kill()
        proc.wait(5)
        raise
    return SimProcess(proc, url)


@contextmanager
def start_sim(*args: str, timeout: float = 20.0) -> Iterator[SimProcess]:
    """Run ``python -m serve_app.sim --port 0 *args`` until the block ends."""
    sim = spawn_sim(*args, timeout=timeout)
    try:
        yield sim
    finally:
        sim.stop()
