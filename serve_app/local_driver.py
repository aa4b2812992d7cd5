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

# Logical CPUs: each vLLM engine reserves some for its replica and workers; the real cores are
# shared through the OMP settings of the profile, not through Ray's accounting.
LOCAL_NUM_CPUS = 16
SEQUENTIAL_ENV = "PD_SERVE_DEPLOY_SEQUENTIAL"


class _Stop(Exception):
    """Raised in the main thread by SIGTERM/SIGINT, to unwind into the shutdown."""


def _raise_stop(signum: int, frame: FrameType | None) -> None:
    raise _Stop(signal.Signals(signum).name)


def _deploy(document: dict[str, Any]) -> None:
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
        return
    # Both apps at once: their engines start in parallel, and this returns once all are RUNNING.
    serve.run_many(targets)


def run(serve_config: Path, ready_file: Path) -> None:
    import ray

    document = json.loads(serve_config.read_text())
    signal.signal(signal.SIGTERM, _raise_stop)
    signal.signal(signal.SIGINT, _raise_stop)
    started = time.monotonic()
    try:
        # Loopback only: NIXL's side channel and Ray's own services bind the node address.
        context: Any = ray.init(
            _node_ip_address="127.0.0.1",
            num_cpus=LOCAL_NUM_CPUS,
            include_dashboard=False,
            # The replicas' logs stay in the session folder; copying them here costs CPU.
            log_to_driver=False,
        )
        _deploy(document)
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
