"""The local CPU profile: a tiny model, a Ray of our own on loopback, both apps, one HTTP port.

``local_up`` generates the tiny model (no download), renders the serving config, starts the
driver process that owns Ray (:mod:`serve_app.local_driver`), waits until both apps answer, and
writes a state file. ``local_down`` stops exactly the processes recorded there::

    state = local_up(Path("examples/serving/local-cpu.yaml"), Path("/tmp/pd-serve"))
    state.base_urls["pd"]          # http://127.0.0.1:8000/pd  (OpenAI: <base>/v1/...)
    local_down(Path("/tmp/pd-serve"))
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import yaml
from pydantic import BaseModel

from serve_app import procs
from serve_app.config import ServingConfig
from serve_app.kv_link import config_notices
from serve_app.loader import load_serving_config
from serve_app.local_driver import EVENTS_FILE
from serve_app.model_shapes import make_local_model
from serve_app.progress import EventLog, Progress, describe
from serve_app.render import render_serve_config, render_serve_config_yaml

STATE_FILE = "state.json"
DEFAULT_CONFIG = Path(__file__).resolve().parents[1] / "examples" / "serving" / "local-cpu.yaml"
DEFAULT_GPU_CONFIG = DEFAULT_CONFIG.with_name("local-gpu.yaml")


class LocalStackError(Exception):
    """The local stack could not be started or stopped; the message says why."""


class LocalState(BaseModel):
    """What ``local up`` started, written to ``<state dir>/state.json``."""

    driver: procs.Proc
    processes: list[procs.Proc] = []
    """The driver's descendants when it became ready (Ray's node processes, replicas, engines)."""
    http_port: int
    base_urls: dict[str, str]
    """App name -> base URL; the OpenAI paths live under it (``<base>/v1/chat/completions``)."""
    model: str
    tokenizer_file: str | None = None
    """The served model's own ``tokenizer.json`` when it is a local file (the gateway counts
    prompts with it); None: a hub model, counted with the gateway's default (cl100k_base)."""
    driver_log: str
    serve_config: str
    session_dir: str | None = None
    seconds_to_ready: float | None = None


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def load_state(state_dir: Path) -> LocalState | None:
    path = state_dir / STATE_FILE
    if not path.is_file():
        return None
    return LocalState.model_validate_json(path.read_text())


def _save_state(state_dir: Path, state: LocalState) -> None:
    tmp = state_dir / (STATE_FILE + ".tmp")
    tmp.write_text(state.model_dump_json(indent=2))
    tmp.replace(state_dir / STATE_FILE)


def localise(cfg: ServingConfig, http_port: int) -> ServingConfig:
    """Pin the HTTP port and give each PD side free NIXL side-channel ports, so two local stacks
    (or another program on Ray's default ports 20000/22000) do not collide."""
    update: dict[str, object] = {"serve": cfg.serve.model_copy(update={"http_port": http_port})}
    if cfg.pd is not None:
        sides = {
            name: side.model_copy(update={"side_channel_port_base": free_port()})
            if side.side_channel_port_base is None
            else side
            for name, side in (("prefill", cfg.pd.prefill), ("decode", cfg.pd.decode))
        }
        update["pd"] = cfg.pd.model_copy(update=sides)
    return cfg.model_copy(update=update)


def base_urls(cfg: ServingConfig) -> dict[str, str]:
    host = "127.0.0.1" if cfg.serve.http_host in ("0.0.0.0", "") else cfg.serve.http_host  # noqa: S104
    root = f"http://{host}:{cfg.serve.http_port}"
    urls = {}
    if cfg.pd is not None:
        urls[cfg.pd.app_name] = root + cfg.pd.route_prefix.rstrip("/")
    if cfg.colocated is not None:
        urls[cfg.colocated.app_name] = root + cfg.colocated.route_prefix.rstrip("/")
    return urls


GATEWAY_CONFIG = "gateway.yaml"


# Prompts this long or longer go to the PD app (the local model's context is 512 tokens).
PD_THRESHOLD_TOKENS = 128
UPSTREAM_TIMEOUTS = {"connect": 5, "first_byte": 120, "idle": 60, "total": 600}


def gateway_config(
    state: LocalState, port: int = 8080, data_dir: Path | None = None
) -> dict[str, object]:
    """The gateway config for this stack: the one ``local up`` writes, ``scripts/run-local.sh``
    runs and the end-to-end tests start (plain YAML data: serve_app imports nothing of the gateway).

    ``<model>`` is routed by prompt length (PD from ``PD_THRESHOLD_TOKENS``, counted with the
    served model's own tokenizer where it is a local file, else with the gateway's default
    tiktoken encoding); ``<model>-pd`` and ``<model>-colocated`` pin one pool. With ``data_dir``,
    keys and usage live in SQLite there (the embedded defaults).
    """
    pools = {
        name: {"urls": [url], "health": {"path": "/v1/models"}, "timeouts": dict(UPSTREAM_TIMEOUTS)}
        for name, url in state.base_urls.items()
    }
    models: dict[str, object] = {}
    if {"pd", "colocated"} <= set(state.base_urls):
        routed: dict[str, object] = {
            "variants": {"stable": {"weight": 1, "pools": {"pd": "pd", "colocated": "colocated"}}},
            "routing": {"pd_threshold_tokens": PD_THRESHOLD_TOKENS},
        }
        if state.tokenizer_file is not None:
            routed["tokenizer"] = {"kind": "huggingface", "tokenizer_file": state.tokenizer_file}
        models[state.model] = routed
    for name in state.base_urls:
        models[f"{state.model}-{name}"] = {"pool": name, "upstream_model": state.model}
    config: dict[str, object] = {"server": {"host": "127.0.0.1", "port": port}}
    if data_dir is not None:
        config["storage"] = {"url": f"sqlite:///{data_dir.resolve() / 'gateway.db'}"}
    config["console"] = {"enabled": True}  # the gateway's web console at /console
    return {**config, "pools": pools, "models": models}


def local_tokenizer_file(cfg: ServingConfig) -> Path | None:
    """The served model's ``tokenizer.json`` (``model.tokenizer``, else ``model.source``) when
    that is a local folder holding one; None for a hub name."""
    folder = Path(cfg.model.tokenizer or cfg.model.source)
    candidate = folder / "tokenizer.json"
    return candidate.resolve() if folder.is_absolute() and candidate.is_file() else None


def _prepare(
    config: Path, state_dir: Path, port: int | None, progress: Progress
) -> tuple[ServingConfig, Path]:
    env = {**os.environ, "PD_SERVE_LOCAL_DIR": str(state_dir)}
    cfg = load_serving_config(config, env)
    if cfg.accelerator.kind == "gpu":
        cfg = _on_this_machines_gpus(cfg)
    chosen = cfg.serve.http_port if port is None else port
    cfg = localise(cfg, free_port() if chosen == 0 else chosen)
    for notice in config_notices(cfg):
        progress.phase(f"note: {notice}")
    model_dir = Path(cfg.model.source)
    if model_dir.is_absolute() and not (model_dir / "config.json").is_file():
        shape = cfg.model.local_shape
        progress.phase(f"generating the {shape} model in {model_dir} (no download)")
        make_local_model(model_dir, shape)
    (state_dir / "serve-config.yaml").write_text(render_serve_config_yaml(cfg))
    rendered = state_dir / "serve-config.json"
    rendered.write_text(json.dumps(render_serve_config(cfg)))
    return cfg, rendered


def _on_this_machines_gpus(cfg: ServingConfig) -> ServingConfig:
    """The GPU profile: every engine on this machine's GPUs, whole or shared (serve_app/gpu.py)."""
    from serve_app.gpu import NoGPUError, detect_gpus
    from serve_app.placement import place_on_one_machine

    try:
        gpus = cfg.accelerator.gpus or detect_gpus()
    except NoGPUError as err:
        raise LocalStackError(f"accelerator.kind gpu: {err}") from None
    return place_on_one_machine(cfg, gpus)


def _driver_env(cfg: ServingConfig) -> dict[str, str]:
    from serve_app.local_driver import SEQUENTIAL_ENV

    return {SEQUENTIAL_ENV: "1"} if cfg.accelerator.kind == "gpu" else {}


def local_up(
    config: Path = DEFAULT_CONFIG,
    state_dir: Path = Path("/tmp/pd-serve"),  # noqa: S108 - the profile's documented default
    *,
    port: int | None = None,
    timeout: float = 600.0,
    progress: Progress | None = None,
    gateway_port: int = 8080,
) -> LocalState:
    """Start the stack and return once every app answers ``GET <base>/v1/models``.

    ``progress`` gets one line per phase (the model, Ray, each deployment healthy, ready); the
    stack's gateway config goes to ``<state dir>/gateway.yaml`` (:func:`gateway_config`).
    """
    progress = progress or Progress(None)
    state_dir = state_dir.resolve()
    state_dir.mkdir(parents=True, exist_ok=True)
    existing = load_state(state_dir)
    if existing is not None and procs.alive(existing.driver):
        raise LocalStackError(f"already up (driver pid {existing.driver[0]}); run local down")
    cfg, rendered = _prepare(config, state_dir, port, progress)
    ready_file = state_dir / "ready.json"
    ready_file.unlink(missing_ok=True)
    (state_dir / EVENTS_FILE).unlink(missing_ok=True)
    log_path = state_dir / "driver.log"
    with log_path.open("wb") as log:
        proc = subprocess.Popen(  # noqa: S603 - our own module, fixed arguments
            [sys.executable, "-m", "serve_app.local_driver", str(rendered), str(ready_file)],
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            # Its own session: a Ctrl-C in the caller's terminal does not reach Ray half-started.
            start_new_session=True,
            env={**os.environ, "PD_SERVE_LOCAL_DIR": str(state_dir), **_driver_env(cfg)},
        )
    driver = procs.this_proc(proc.pid) or (proc.pid, 0)
    progress.phase(f"starting the Ray driver (pid {proc.pid}, log {log_path})")
    tokenizer = local_tokenizer_file(cfg)
    if tokenizer is None:
        progress.phase(
            f"no local tokenizer.json for {cfg.model.id}: the gateway counts its prompts with "
            "cl100k_base (approximate routing by length)"
        )
    state = LocalState(
        driver=driver,
        http_port=cfg.serve.http_port,
        base_urls=base_urls(cfg),
        model=cfg.model.id,
        tokenizer_file=None if tokenizer is None else str(tokenizer),
        driver_log=str(log_path),
        serve_config=str(rendered),
    )
    # Saved before waiting, so `local down` can stop a start-up that hangs or is interrupted.
    _save_state(state_dir, state)
    try:
        ready = _wait_ready(proc, ready_file, state, timeout, progress)
    except BaseException:
        local_down(state_dir)
        raise
    state = state.model_copy(
        update={
            "processes": procs.descendants(proc.pid),
            "session_dir": ready["session_dir"],
            "seconds_to_ready": ready["seconds_to_ready"],
        }
    )
    _save_state(state_dir, state)
    document = gateway_config(state, gateway_port, data_dir=state_dir)
    (state_dir / GATEWAY_CONFIG).write_text(yaml.safe_dump(document, sort_keys=False))
    progress.phase(f"ready: {', '.join(state.base_urls)}")
    return state


def _wait_ready(
    proc: subprocess.Popen[bytes],
    ready_file: Path,
    state: LocalState,
    timeout: float,
    progress: Progress,
) -> dict[str, object]:
    deadline = time.monotonic() + timeout
    events = EventLog(ready_file.with_name(EVENTS_FILE))
    while not ready_file.is_file():
        for phase, detail in events.read_new():
            progress.phase(describe(phase, detail))
        if proc.poll() is not None:
            raise LocalStackError(
                f"the driver exited with {proc.returncode}:\n{_tail(Path(state.driver_log))}"
            )
        if time.monotonic() > deadline:
            raise LocalStackError(f"not ready in {timeout:.0f}s:\n{_tail(Path(state.driver_log))}")
        time.sleep(0.5)
    for phase, detail in events.read_new():
        progress.phase(describe(phase, detail))
    for url in state.base_urls.values():
        _wait_http_ok(url + "/v1/models", deadline)
    ready: dict[str, object] = json.loads(ready_file.read_text())
    return ready


def _wait_http_ok(url: str, deadline: float) -> None:
    while True:
        try:
            with urllib.request.urlopen(url, timeout=5) as response:  # noqa: S310 - loopback
                if response.status == 200:
                    return
        except (urllib.error.URLError, OSError):
            pass
        if time.monotonic() > deadline:
            raise LocalStackError(f"{url} did not answer 200 in time")
        time.sleep(0.5)


def _tail(path: Path, lines: int = 40) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


def local_down(state_dir: Path = Path("/tmp/pd-serve"), timeout: float = 60.0) -> bool:  # noqa: S108
    """Stop what ``local up`` recorded in ``state_dir``; False if nothing was recorded."""
    state_dir = state_dir.resolve()
    state = load_state(state_dir)
    if state is None:
        return False
    # The tree as it is now (replicas restarted since start-up included), and as it was at ready.
    tree = state.processes + (
        procs.descendants(state.driver[0]) if procs.alive(state.driver) else []
    )
    # The driver shuts Serve and its Ray down cleanly on SIGTERM.
    if procs.signal_if_alive(state.driver, signal.SIGTERM):
        deadline = time.monotonic() + timeout
        while procs.alive(state.driver) and time.monotonic() < deadline:
            time.sleep(0.2)
    # Whatever did not stop in time, or outlived the driver, is killed: only recorded processes.
    procs.signal_if_alive(state.driver, signal.SIGKILL)
    for proc in tree:
        procs.signal_if_alive(proc, signal.SIGKILL)
    # Return only once they are gone, so the caller may start again (ports, memory) at once.
    deadline = time.monotonic() + 10
    while any(procs.alive(p) for p in [state.driver, *tree]) and time.monotonic() < deadline:
        time.sleep(0.1)
    (state_dir / STATE_FILE).unlink(missing_ok=True)
    (state_dir / "ready.json").unlink(missing_ok=True)
    return True
