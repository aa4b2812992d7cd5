"""Recorded processes are signalled only while they are still the process recorded."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from serve_app import procs
from serve_app.local import STATE_FILE, LocalState, local_down

# A parent that starts a child and both sleep: a tree like the Ray driver's, in miniature.
TREE = (
    "import subprocess, sys, time;"
    "subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)']);"
    "time.sleep(60)"
)


@pytest.fixture
def tree() -> Iterator[subprocess.Popen[bytes]]:
    parent = subprocess.Popen([sys.executable, "-c", TREE])
    try:
        deadline = time.monotonic() + 10
        while not procs.descendants(parent.pid) and time.monotonic() < deadline:
            time.sleep(0.05)
        yield parent
    finally:
        for child in procs.descendants(parent.pid):
            procs.signal_if_alive(child, signal.SIGKILL)
        parent.kill()
        parent.wait()


def test_descendants_finds_the_child(tree: subprocess.Popen[bytes]) -> None:
    (child,) = procs.descendants(tree.pid)
    assert procs.alive(child)
    assert procs.start_ticks(child[0]) == child[1]


def test_signal_reaches_a_recorded_process(tree: subprocess.Popen[bytes]) -> None:
    (child,) = procs.descendants(tree.pid)
    assert procs.signal_if_alive(child, signal.SIGKILL)
    deadline = time.monotonic() + 10
    while procs.alive(child) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not procs.alive(child)


def test_a_reused_pid_is_not_signalled(tree: subprocess.Popen[bytes]) -> None:
    (child,) = procs.descendants(tree.pid)
    impostor = (child[0], child[1] - 1)  # same pid, another start time: not ours any more
    assert not procs.alive(impostor)
    assert not procs.signal_if_alive(impostor, signal.SIGKILL)
    assert procs.alive(child)


def test_a_finished_process_is_not_alive() -> None:
    done = subprocess.Popen([sys.executable, "-c", "pass"])
    recorded = procs.this_proc(done.pid)
    done.wait()
    assert recorded is None or not procs.alive(recorded)


def test_local_down_stops_the_recorded_driver_and_its_descendants(
    tree: subprocess.Popen[bytes], tmp_path: Path
) -> None:
    driver = procs.this_proc(tree.pid)
    assert driver is not None
    children = procs.descendants(tree.pid)
    state = LocalState(
        driver=driver,
        processes=children,
        http_port=1,
        base_urls={},
        model="m",
        driver_log="-",
        serve_config="-",
    )
    (tmp_path / STATE_FILE).write_text(state.model_dump_json())
    assert local_down(tmp_path, timeout=10)
    tree.wait(10)  # reap it: it is this test's child
    assert not any(procs.alive(p) for p in children)
    assert not (tmp_path / STATE_FILE).exists()
