"""Start-up progress: one line per phase with the elapsed time, the driver's phases followed from
its events file, and the one gateway config of the local stack."""

from __future__ import annotations

import io
import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from gateway.config import parse_config
from serve_app.local import LocalState, _wait_ready, gateway_config
from serve_app.local_driver import EVENTS_FILE
from serve_app.progress import EventLog, Progress


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_a_line_per_phase_with_the_seconds_since_start() -> None:
    out, clock = io.StringIO(), FakeClock()
    progress = Progress(out, clock)
    progress.phase("generating the tiny model")
    clock.now += 83.25
    progress.phase("deployment ready: pd/Decode (1 replica(s))")
    assert out.getvalue().splitlines() == [
        "[   0.0s] generating the tiny model",
        "[  83.2s] deployment ready: pd/Decode (1 replica(s))",
    ]


def test_no_stream_prints_nothing() -> None:
    Progress(None).phase("anything")  # --quiet: no output, no error


def test_event_log_returns_only_complete_new_lines(tmp_path: Path) -> None:
    events = EventLog(tmp_path / EVENTS_FILE)
    assert events.read_new() == []
    events.write("starting Ray", "16 logical CPUs")
    with (tmp_path / EVENTS_FILE).open("a") as f:
        f.write('{"phase": "Ray st')  # the writer is mid-line
    assert events.read_new() == [("starting Ray", "16 logical CPUs")]
    with (tmp_path / EVENTS_FILE).open("a") as f:
        f.write('arted", "detail": ""}\n')
    assert events.read_new() == [("Ray started", "")]
    assert events.read_new() == []


# Stands in for serve_app.local_driver: writes its phases one by one, then the ready file.
FAKE_DRIVER = textwrap.dedent(
    """
    import json, sys, time
    from pathlib import Path
    from serve_app.progress import EventLog
    ready = Path(sys.argv[1])
    events = EventLog(ready.with_name("events.jsonl"))
    for phase, detail in [("starting Ray", "16 logical CPUs on 127.0.0.1"), ("Ray started", ""),
                          ("deployment ready", "pd/Prefill:tiny (1 replica(s))"),
                          ("deployment ready", "colocated/LLMServer:tiny (2 replica(s))")]:
        events.write(phase, detail)
        time.sleep(0.05)
    ready.write_text(json.dumps({"session_dir": "/tmp/ray/x", "seconds_to_ready": 1.0}))
    time.sleep(30)
    """
)


def test_local_up_prints_the_drivers_phases_as_they_happen(tmp_path: Path) -> None:
    ready = tmp_path / "ready.json"
    proc = subprocess.Popen([sys.executable, "-c", FAKE_DRIVER, str(ready)])
    state = LocalState(
        driver=(proc.pid, 0),
        http_port=0,
        base_urls={},
        model="tiny",
        driver_log=str(tmp_path / "driver.log"),
        serve_config="",
    )
    out = io.StringIO()
    try:
        ready_info = _wait_ready(proc, ready, state, timeout=60, progress=Progress(out))
    finally:
        proc.kill()
        proc.wait()
    assert ready_info["session_dir"] == "/tmp/ray/x"
    phases = [line.split("] ", 1)[1] for line in out.getvalue().splitlines()]
    assert phases == [
        "starting Ray: 16 logical CPUs on 127.0.0.1",
        "Ray started",
        "deployment ready: pd/Prefill:tiny (1 replica(s))",
        "deployment ready: colocated/LLMServer:tiny (2 replica(s))",
    ]


def local_state(tmp_path: Path) -> LocalState:
    return LocalState(
        driver=(1, 0),
        http_port=8000,
        base_urls={
            "pd": "http://127.0.0.1:8000/pd",
            "colocated": "http://127.0.0.1:8000/colocated",
        },
        model="tiny",
        driver_log=str(tmp_path / "driver.log"),
        serve_config=str(tmp_path / "serve-config.json"),
    )


def test_the_local_gateway_config_is_a_valid_gateway_config(tmp_path: Path) -> None:
    document = gateway_config(local_state(tmp_path), 18080, data_dir=tmp_path)
    config = parse_config(json.loads(json.dumps(document)), env={})
    assert config.server.port == 18080
    assert set(document["models"]) == {"tiny", "tiny-pd", "tiny-colocated"}  # type: ignore[call-overload]
    tokenizer = document["models"]["tiny"]["tokenizer"]["tokenizer_file"]  # type: ignore[index]
    assert tokenizer == str(tmp_path / "tiny-model" / "tokenizer.json")


@pytest.mark.parametrize("script", ["scripts/run-local.sh"])
def test_run_local_uses_the_gateway_config_local_up_writes(script: str) -> None:
    text = (Path(__file__).parents[3] / script).read_text()
    assert 'gateway_yaml="$STATE/serve/gateway.yaml"' in text
    assert "--serve-state" not in text
