"""The process that owns the local Ray: starts it on loopback, deploys the rendered apps, waits.

Run by ``pd-serve local up`` (never by hand): ``python -m serve_app.local_driver SERVE_CONFIG
READY_FILE``. Ray's node processes are this process's children, so stopping it (SIGTERM) shuts
Serve and that Ray down and nothing else on the machine.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from pathlib import Path
from types import FrameType
from typing import Any

from serve_app.progress import EventLog

# Logical CPUs: each vLLM engine reserves some for its replica and workers; the real cores are
# shared through the OMP settings of the profile, not through Ray's accounting.
LOCAL_NUM_CPUS = 16
SEQUENTIAL_ENV = "PD_SERVE_DEPLOY_SEQUENTIAL"
EVENTS_FILE = "events.jsonl"
"""Beside the ready file: the driver's phases, followed by ``local up`` (serve_app.progress)."""


class _Stop(Exception):
    """Raised in the main thread by SIGTERM/SIGINT, to unwind into the shutdown."""


def _raise_stop(signum: int, frame: FrameType | None) -> None:
    raise _Stop(signal.Signals(signum).name)


def _deploy(document: dict[str, Any], events: EventLog) -> None:
    from ray import serve
    from ray.serve.api import RunTarget

    from serve_app.builders import build_application

    serve.start(http_options=document["http_options"])
    targets = [
        RunTarget(
            target=build_application(app["import_path"], app["args"]),
            name=app["name"],
            route_prefix=app["route_prefix"],
        )
        for app in document["applications"]
    ]
    if os.environ.get(SEQUENTIAL_ENV) == "1":
        # GPU engines sharing a GPU: one app at a time, so that no engine profiles its memory
        # while another one's allocations come and go on the same device.
        for target in targets:
            serve.run_many([target])
        events.write("deploying", ", ".join(app["name"] for app in document["applications"]))
        _follow_deployments(events)
        return
    # Both apps at once: their engines start in parallel; readiness is followed below, so each
    # deployment's line appears when it becomes healthy.
    serve.run_many(targets, wait_for_applications_running=False)
    events.write("deploying", ", ".join(app["name"] for app in document["applications"]))
    _follow_deployments(events)


def _follow_deployments(events: EventLog, poll_s: float = 1.0) -> None:
    """Report each deployment once when healthy; return when every app runs, raise if one fails."""
    from ray import serve

    reported: set[str] = set()
    while True:
        status = serve.status()
        running = 0
        for app_name, app in status.applications.items():
            if app.status == "DEPLOY_FAILED":
                raise RuntimeError(f"application {app_name} failed to deploy: {app.message}")
            for name, deployment in app.deployments.items():
                key = f"{app_name}/{name}"
                if deployment.status == "HEALTHY" and key not in reported:
                    reported.add(key)
                    replicas = sum(deployment.replica_states.values())
                    events.write("deployment ready", f"{key} ({replicas} replica(s))")
            running += app.status == "RUNNING"
        if status.applications and running == len(status.applications):
            return
        time.sleep(poll_s)


def run(serve_config: Path, ready_file: Path) -> None:
    import ray

    document = json.loads(serve_config.read_text())
    signal.signal(signal.SIGTERM, _raise_stop)
    signal.signal(signal.SIGINT, _raise_stop)
    started = time.monotonic()
    events = EventLog(ready_file.with_name(EVENTS_FILE))
    try:
        events.write("starting Ray", f"{LOCAL_NUM_CPUS} logical CPUs on 127.0.0.1")
        # Loopback only: NIXL's side channel and Ray's own services bind the node address.
        context: Any = ray.init(
            _node_ip_address="127.0.0.1",
            num_cpus=LOCAL_NUM_CPUS,
            include_dashboard=False,
            # The replicas' logs stay in the session folder; copying them here costs CPU.
            log_to_driver=False,
        )
        events.write("Ray started", context.address_info["session_dir"])
        _deploy(document, events)
        ready = {
            "pid": os.getpid(),
            "session_dir": context.address_info["session_dir"],
            "seconds_to_ready": round(time.monotonic() - started, 1),
        }
        ready_file.write_text(json.dumps(ready))
        while True:
            time.sleep(3600)
    except _Stop:
        pass
    finally:
        _shutdown()


def _shutdown() -> None:
    import ray
    from ray import serve

    # A second signal during the shutdown must not abandon it half way.
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if ray.is_initialized():
        try:
            # Ray's shutdown is untyped: called through an Any name, mypy is clean with Ray
            # installed or not (an ignore would be unused where Ray is absent).
            shutdown_serve: Any = serve.shutdown
            shutdown_serve()
        finally:
            ray.shutdown()


if __name__ == "__main__":
    run(Path(sys.argv[1]), Path(sys.argv[2]))
