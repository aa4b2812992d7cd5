"""Start-up progress: one line per phase with the elapsed time, the driver's phases followed from
its events file, and the one gateway config of the local stack."""

from __future__ import annotations

import io
import json
import subprocess
import sys
import textwrap
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from gateway.config import parse_config
from serve_app.loader import load_serving_config
from serve_app.local import LocalState, _wait_ready, gateway_config, local_tokenizer_file
from serve_app.local_driver import EVENTS_FILE, deploy_apps, follow_deployments
from serve_app.progress import EventLog, Progress

EXAMPLES = Path(__file__).parents[3] / "examples" / "serving"


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


def local_state(tmp_path: Path, model: str = "tiny", tokenizer: str | None = None) -> LocalState:
    return LocalState(
        driver=(1, 0),
        http_port=8000,
        base_urls={
            "pd": "http://127.0.0.1:8000/pd",
            "colocated": "http://127.0.0.1:8000/colocated",
        },
        model=model,
        tokenizer_file=tokenizer,
        driver_log=str(tmp_path / "driver.log"),
        serve_config=str(tmp_path / "serve-config.json"),
    )


def test_the_local_gateway_config_is_a_valid_gateway_config(tmp_path: Path) -> None:
    own = str(tmp_path / "llama-3-8b" / "tokenizer.json")
    state = local_state(tmp_path, "llama-8b-shape", own)
    document = gateway_config(state, 18080, data_dir=tmp_path)
    config = parse_config(json.loads(json.dumps(document)), env={})
    assert config.server.port == 18080
    models: Any = document["models"]
    assert set(models) == {"llama-8b-shape", "llama-8b-shape-pd", "llama-8b-shape-colocated"}
    # The served model's own tokenizer, not the tiny model's.
    assert models["llama-8b-shape"]["tokenizer"]["tokenizer_file"] == own


def test_a_hub_model_is_counted_with_the_gateways_default_tokenizer(tmp_path: Path) -> None:
    document = gateway_config(local_state(tmp_path, "Qwen/Qwen3.5-9B"), data_dir=tmp_path)
    config = parse_config(json.loads(json.dumps(document)), env={})
    assert config.models["Qwen/Qwen3.5-9B"].tokenizer is None  # the gateway-wide one:
    assert config.tokenizer.kind == "tiktoken"


def test_the_tokenizer_is_the_one_beside_the_served_model(tmp_path: Path) -> None:
    cfg = load_serving_config(
        EXAMPLES / "local-gpu-llama-8b.yaml", {"PD_SERVE_LOCAL_DIR": str(tmp_path)}
    )
    assert local_tokenizer_file(cfg) is None  # not generated yet
    (tmp_path / "llama-3-8b").mkdir()
    (tmp_path / "llama-3-8b" / "tokenizer.json").write_text("{}")
    assert local_tokenizer_file(cfg) == tmp_path / "llama-3-8b" / "tokenizer.json"
    hub = cfg.model_copy(update={"model": cfg.model.model_copy(update={"source": "org/model"})})
    assert local_tokenizer_file(hub) is None


@pytest.mark.parametrize("script", ["scripts/run-local.sh"])
def test_run_local_uses_the_gateway_config_local_up_writes(script: str) -> None:
    text = (Path(__file__).parents[3] / script).read_text()
    assert 'gateway_yaml="$STATE/serve/gateway.yaml"' in text
    assert "--serve-state" not in text


def app_status(status: str, **deployments: str) -> SimpleNamespace:
    return SimpleNamespace(
        status=status,
        message="engine died" if status == "DEPLOY_FAILED" else "",
        deployments={
            name: SimpleNamespace(status=state, replica_states={"RUNNING": 1})
            for name, state in deployments.items()
        },
    )


class FakeServe:
    """Serve's run_many/status as a GPU start-up shows them: each app's deployments turn healthy
    one by one, an app runs once all of its are healthy."""

    def __init__(self, script: dict[str, list[dict[str, str]]]) -> None:
        self.script = script
        self.deployed: list[str] = []
        self.calls: dict[str, int] = {}

    def run_many(self, targets: list[str], wait_for_applications_running: bool) -> None:
        assert wait_for_applications_running is False  # never blocks the progress lines
        self.deployed += targets

    def status(self) -> SimpleNamespace:
        apps = {}
        for name in self.deployed:
            steps = self.script[name]
            i = min(self.calls.get(name, 0), len(steps) - 1)
            self.calls[name] = self.calls.get(name, 0) + 1
            healthy = all(s == "HEALTHY" for s in steps[i].values())
            apps[name] = app_status("RUNNING" if healthy else "DEPLOYING", **steps[i])
        return SimpleNamespace(applications=apps)


def test_sequential_deploy_reports_each_deployment_as_it_becomes_ready(tmp_path: Path) -> None:
    serve = FakeServe(
        {
            "pd": [
                {"Ingress": "UPDATING", "Prefill": "UPDATING"},
                {"Ingress": "HEALTHY", "Prefill": "UPDATING"},
                {"Ingress": "HEALTHY", "Prefill": "HEALTHY"},
            ],
            "colocated": [{"LLMServer": "UPDATING"}, {"LLMServer": "HEALTHY"}],
        }
    )
    events = EventLog(tmp_path / EVENTS_FILE)
    deploy_apps(
        ["pd", "colocated"],
        ["pd", "colocated"],
        events,
        run_many=serve.run_many,
        status=serve.status,
        sequential=True,
        poll_s=0,
    )
    assert events.read_new() == [
        ("deploying", "pd"),
        ("deployment ready", "pd/Ingress (1 replica(s))"),
        ("deployment ready", "pd/Prefill (1 replica(s))"),
        ("deploying", "colocated"),
        ("deployment ready", "colocated/LLMServer (1 replica(s))"),
    ]


def test_a_waiting_line_names_what_is_still_starting(tmp_path: Path) -> None:
    clock = FakeClock()
    states = iter([{"Prefill": "UPDATING"}, {"Prefill": "UPDATING"}, {"Prefill": "HEALTHY"}])

    def status() -> SimpleNamespace:
        deployments = next(states)
        running = "RUNNING" if deployments["Prefill"] == "HEALTHY" else "DEPLOYING"
        return SimpleNamespace(applications={"pd": app_status(running, **deployments)})

    def sleep(seconds: float) -> None:
        clock.now += 31

    events = EventLog(tmp_path / EVENTS_FILE)
    follow_deployments(events, status, {"pd"}, set(), 1.0, 30.0, clock=clock, sleep=sleep)
    assert events.read_new() == [
        ("waiting", "pd/Prefill UPDATING"),
        ("deployment ready", "pd/Prefill (1 replica(s))"),
    ]


def test_a_failed_app_stops_the_wait(tmp_path: Path) -> None:
    def status() -> SimpleNamespace:
        return SimpleNamespace(
            applications={"pd": app_status("DEPLOY_FAILED", Prefill="UNHEALTHY")}
        )

    with pytest.raises(RuntimeError, match="pd failed to deploy: engine died"):
        follow_deployments(EventLog(tmp_path / EVENTS_FILE), status, {"pd"}, set(), 0)
