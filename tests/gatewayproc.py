"""Start a real gateway process (``python -m gateway run``) for tests, and stop it by its pid."""

from __future__ import annotations

import itertools
import os
import re
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import yaml


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class GatewayProcess:
    def __init__(self, proc: subprocess.Popen[bytes], port: int, log_path: Path) -> None:
        self.proc = proc
        self.port = port
        self.url = f"http://127.0.0.1:{port}"
        self.base_url = self.url + "/v1"
        self.log_path = log_path
        self.config_path: Path | None = None
        """The config file it was started with (a test may rewrite it and reload)."""

    def logs(self) -> str:
        return self.log_path.read_text()

    def access_log(
        self, request_id: str | None = None, timeout: float = 3.0
    ) -> list[dict[str, Any]]:
        """The access log's entries; with ``request_id``, waits until that request's entry is
        written (the gateway writes its access log in batches, every 50 ms)."""
        deadline = time.monotonic() + timeout
        while True:
            entries = self._access_entries()
            if request_id is None or any(request_id in _ids(e) for e in entries):
                return entries
            if time.monotonic() > deadline:
                raise AssertionError(f"no access log entry for {request_id}")
            time.sleep(0.02)

    def _access_entries(self) -> list[dict[str, Any]]:
        import orjson

        entries = []
        for line in self.logs().splitlines():
            if line.startswith("{"):
                entry = orjson.loads(line)
                if entry.get("logger") == "gateway.access":
                    entries.append(entry)
        return entries

    def terminate(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)

    def stop(self, timeout: float = 15) -> int:
        self.terminate()
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            return self.proc.wait(5)


def write_config(path: Path, config: dict[str, Any]) -> Path:
    path.write_text(yaml.safe_dump(config))
    return path


@contextmanager
def start_gateway(
    config: dict[str, Any],
    tmp_path: Path,
    *,
    env: dict[str, str] | None = None,
    ready: str = "/healthz",
) -> Iterator[GatewayProcess]:
    """Run ``pd-gateway run`` on a loopback port until the block ends: port 0 (the server binds
    a free one and says which in its log) for one worker; several workers are bound by uvicorn's
    supervisor, whose log names the configured port, so they get a probed free port."""
    workers = config.get("server", {}).get("workers", 1)
    port = 0 if workers == 1 else free_port()
    config = {**config, "server": {**config.get("server", {}), "host": "127.0.0.1", "port": port}}
    # The store in the test's folder, and no keys asked unless the test is about them.
    config.setdefault("storage", {"url": f"sqlite:///{tmp_path}/gateway.db"})
    config.setdefault("auth", {"enabled": False})
    name = f"gateway-{next(_serial)}"
    cfg_path = write_config(tmp_path / f"{name}.yaml", config)
    log_path = tmp_path / f"{name}.log"
    with log_path.open("wb") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "gateway", "run", "--config", str(cfg_path)],
            stdout=log,
            stderr=subprocess.STDOUT,
            env={**os.environ, **(env or {})},
        )
    gateway = GatewayProcess(proc, port, log_path)
    gateway.config_path = cfg_path
    try:
        if port == 0:
            gateway.port = _bound_port(gateway)
            gateway.url = f"http://127.0.0.1:{gateway.port}"
            gateway.base_url = gateway.url + "/v1"
        _wait_ready(gateway, ready)
        yield gateway
    finally:
        gateway.stop()


_serial = itertools.count()
_RUNNING_ON = re.compile(r"running on http://127\.0\.0\.1:(\d+)")


def _bound_port(gateway: GatewayProcess, timeout: float = 60) -> int:
    """The port the server bound, from its "Uvicorn running on" log line."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = _RUNNING_ON.search(gateway.logs())
        if found:
            return int(found.group(1))
        if gateway.proc.poll() is not None:
            raise RuntimeError(f"gateway exited with {gateway.proc.returncode}:\n{gateway.logs()}")
        time.sleep(0.05)
    raise TimeoutError(f"gateway did not say its port within {timeout}s:\n{gateway.logs()}")


def _wait_ready(gateway: GatewayProcess, path: str, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if gateway.proc.poll() is not None:
            raise RuntimeError(f"gateway exited with {gateway.proc.returncode}:\n{gateway.logs()}")
        try:
            if httpx.get(gateway.url + path, timeout=1).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.05)
    raise TimeoutError(f"gateway not ready within {timeout}s:\n{gateway.logs()}")


def _ids(entry: dict[str, Any]) -> tuple[object, object]:
    """An access log entry's ids: the gateway's own and the client's correlation id."""
    return entry.get("request_id"), entry.get("correlation_id")
