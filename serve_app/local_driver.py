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
from collections.abc import Callable
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
    deploy_apps(
        targets,
        [app["name"] for app in document["applications"]],
        events,
        run_many=serve.run_many,
        status=serve.status,
        sequential=os.environ.get(SEQUENTIAL_ENV) == "1",
    )


def deploy_apps(
    targets: list[Any],
    names: list[str],
    events: EventLog,
    *,
    run_many: Callable[..., Any],
    status: Callable[[], Any],
    sequential: bool,
    poll_s: float = 1.0,
    heartbeat_s: float = 30.0,
) -> None:
    """Deploy the apps without blocking in Serve, so each deployment's line appears as it
    becomes healthy (and a ``waiting`` line every ``heartbeat_s`` names what is still starting).

    ``sequential`` (GPU engines sharing a GPU): one app at a time, so that no engine profiles its
    memory while another one's allocations come and go on the same device. Otherwise every app
    at once, their engines starting in parallel.
    """
    reported: set[str] = set()
    groups = (
        [[(t, n)] for t, n in zip(targets, names, strict=True)]
        if sequential
        else [list(zip(targets, names, strict=True))]
    )
    for group in groups:
        apps = [name for _, name in group]
        events.write("deploying", ", ".join(apps))
        run_many([target for target, _ in group], wait_for_applications_running=False)
        follow_deployments(events, status, set(apps), reported, poll_s, heartbeat_s)


def follow_deployments(
    events: EventLog,
    status: Callable[[], Any],
    apps: set[str],
    reported: set[str],
    poll_s: float = 1.0,
    heartbeat_s: float = 30.0,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> None:
    """Report each deployment once when healthy; return when every app in ``apps`` runs, raise
    if one fails. ``reported`` carries what was already reported across calls."""
    last_beat = clock()
    while True:
        current = status()
        running, starting = set(), []
        for app_name, app in current.applications.items():
            if app_name not in apps:
                continue
            if app.status == "DEPLOY_FAILED":
                raise RuntimeError(f"application {app_name} failed to deploy: {app.message}")
            for name, deployment in app.deployments.items():
                key = f"{app_name}/{name}"
                if deployment.status == "HEALTHY":
                    if key not in reported:
                        reported.add(key)
                        replicas = sum(deployment.replica_states.values())
                        events.write("deployment ready", f"{key} ({replicas} replica(s))")
                else:
                    # Serve's status enums print as DeploymentStatus.X; their value is X.
                    starting.append(
                        f"{key} {getattr(deployment.status, 'value', deployment.status)}"
                    )
            if app.status == "RUNNING":
                running.add(app_name)
        if running == apps:
            return
        if clock() - last_beat >= heartbeat_s:
            last_beat = clock()
            events.write(
                "waiting", ", ".join(starting) or "for " + ", ".join(sorted(apps - running))
            )
        sleep(poll_s)


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
