"""Serving-aware routing benchmark: two capacity-simulated pools behind one gateway, three
experiments of issue 25, each run on the gateway as configured ("baseline") and, with
``--overlay FILE``, on the same gateway with that YAML merged into its config ("overlay").

The pools are the project's simulator (serve_app/sim, not a real engine) with its capacity model
on: a PD pool (the first token also waits for a KV transfer of the whole prompt) and a colocated
one, each an engine with a bounded batch, an FCFS waiting queue and a block prefix cache. The
simulated times are scaled so that an engine saturates at a few requests per second to a few
tens, far below what the gateway relays on one core (thousands of streams per second), so the
figures show the engines' queues and caches, not the gateway or the load generator.

- ``cache``: pd-loadtest's multi-turn workload (each turn resends the history); TTFT p50/p99,
  the prefix-hit rate from ``usage.prompt_tokens_details.cached_tokens``, prefill tokens per pool.
- ``tenants``: the quiet tenant alone (its baseline), then with a loud tenant, each with its own
  key: the loud one offers 5x the colocated engine's nominal capacity, the quiet one 20%.
- ``overload``: a rate sweep past the knee; goodput under a TTFT SLO.

    .venv/bin/python loadtests/bench_serving.py [--experiment cache|tenants|overload|all]
        [--overlay gateway-overlay.yaml [--baseline]] [--out bench-serving/] [--quick]
        [--time-scale X] [--gateways N] [--tree DIR] [--replicas N]

``--gateways N`` starts N gateway processes on one Redis (a redis-server of the benchmark's own,
on a unix socket): the rate limits on it, and the load shared through it (``load_sharing`` where
the tree has it, issue 35; an older tree shares what it can through ``limits.backend: redis``);
pd-loadtest sends its requests round robin over the N. ``--tree DIR`` runs the gateway (and its
command line) from another checkout (``PYTHONPATH``), e.g. ``git archive main`` unpacked.
``--replicas N`` gives each pool N simulated engines (a conversation's cache is then on one of
them: the replica choice, and so the gateways' shared prefix index, decides its hits).

``--time-scale X`` multiplies every simulated time by X and divides the offered rates by X
(sending X times longer, so the sample counts stay): the same runs relative to the engines'
capacity, with X times less work for the gateway and the load generator.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from bench_overhead import Processes, free_port, wait_http

PYTHON = sys.executable
MODEL = "chat"
UPSTREAM_MODEL = "sim-model"
THRESHOLD = 1024
HASH_ENV = {"PD_GATEWAY_KEY_HASH_SECRET": "bench-serving-hash-secret-0123456789abcdef"}
TENANTS = ("loud", "quiet")
CORES = f"0-{(os.cpu_count() or 2) - 1}"  # every core: nothing is pinned


@dataclass(frozen=True)
class Engines:
    """Both pools' simulated engines. ``scale`` multiplies every simulated time (and divides the
    offered rates, stretching the sending time to keep the sample counts): a slower engine means
    less work for the gateway at the same load relative to capacity."""

    scale: float = 1.0

    def args(self, pd: bool) -> list[str]:
        # One engine step costs step + prefill tokens * prefill-per-token + decode seqs * per-seq.
        ms = {"--step-ms": 15, "--prefill-per-token-ms": 0.2, "--decode-per-seq-ms": 1}
        if pd:
            ms["--kv-transfer-per-token-ms"] = 0.1
        timed = [part for k, v in ms.items() for part in (k, f"{v * self.scale:g}")]
        return [
            "--capacity", "--max-num-seqs", "8", "--max-num-batched-tokens", "2048",
            "--block-size", "16", "--num-gpu-blocks-override", "4096", *timed,
        ]  # fmt: skip

    def capacity(self, output_tokens: int, prompt_tokens: int) -> float:
        """Requests/s one engine finishes with a full batch of uncached requests."""
        seqs, step, per_seq, prefill = 8, 15.0, 1.0, 0.2
        decode_s = output_tokens * (step + per_seq * seqs) / 1000
        prefill_s = prefill * prompt_tokens * seqs / 1000  # each admission stalls the batch
        return seqs / (decode_s + prefill_s) / self.scale


def gateway_config(
    pd_url: str | list[str], colo_url: str | list[str], db_url: str, port: int
) -> dict[str, Any]:
    timeouts = {"first_byte": 120, "idle": 120}
    pd_urls = [pd_url] if isinstance(pd_url, str) else pd_url
    colo_urls = [colo_url] if isinstance(colo_url, str) else colo_url
    return {
        "server": {"host": "127.0.0.1", "port": port, "access_log": False},
        "storage": {"url": db_url},
        "auth": {"enabled": True},
        "pools": {
            "pd": {"urls": pd_urls, "timeouts": timeouts},
            "colocated": {"urls": colo_urls, "timeouts": timeouts},
        },
        "models": {
            MODEL: {
                "upstream_model": UPSTREAM_MODEL,
                "routing": {"pd_threshold_tokens": THRESHOLD},
                "variants": {
                    "stable": {"weight": 1, "pools": {"pd": "pd", "colocated": "colocated"}}
                },
            }
        },
    }


def merged(base: dict[str, Any], overlay: dict[str, Any]) -> dict[str, Any]:
    """``overlay`` deep-merged into ``base`` (mappings merge, anything else replaces)."""
    out = dict(base)
    for key, value in overlay.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = merged(out[key], value)
        else:
            out[key] = value
    return out


@dataclass(frozen=True)
class Stack:
    url: str
    """The gateways' base URLs, ``|`` between them (pd-loadtest sends round robin)."""
    keys: dict[str, str]  # environment variable -> key
    sims: dict[str, str]
    logs: tuple[Path, ...]  # each gateway's output (its access log with server.access_log)


@dataclass(frozen=True)
class Gateways:
    """How many gateway processes, and whose code they run (None: this tree)."""

    count: int = 1
    tree: Path | None = None
    replicas: int = 1
    """Simulated engines per pool (more than one: the prefix affinity across them matters)."""

    def env(self) -> dict[str, str]:
        env = {**os.environ, **HASH_ENV}
        if self.tree is not None:
            inherited = os.environ.get("PYTHONPATH")
            env["PYTHONPATH"] = os.pathsep.join(p for p in (str(self.tree), inherited) if p)
        return env

    def sharing(self, redis_url: str) -> dict[str, Any]:
        """The config that makes N gateways one: the limits on Redis, and the load book shared
        where the tree has ``load_sharing`` (else what the tree shares through the limits)."""
        root = self.tree or Path(__file__).resolve().parent.parent
        shared: dict[str, Any] = {"limits": {"backend": "redis", "redis_url": redis_url}}
        if (root / "gateway" / "routing" / "load_config.py").exists():
            shared["load_sharing"] = {"backend": "redis", "redis_url": redis_url}
        return shared


def _cli(db_url: str, gateways: Gateways, *args: str) -> str:
    done = subprocess.run(
        [PYTHON, "-m", "gateway", *args, "--database-url", db_url],
        capture_output=True, text=True, timeout=120, check=True, env=gateways.env(),
    )  # fmt: skip
    return done.stdout.strip()


def _start_redis(procs: Processes, folder: Path) -> str:
    sock = folder / "redis.sock"
    proc = subprocess.Popen(
        ["redis-server", "--port", "0", "--unixsocket", str(sock), "--save", "",
         "--appendonly", "no"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    procs.procs.append(proc)
    deadline = time.monotonic() + 10
    while not sock.exists():
        if time.monotonic() > deadline or proc.poll() is not None:
            raise RuntimeError("redis-server did not start")
        time.sleep(0.02)
    return f"unix://{sock}"


def _start_sim(procs: Processes, args: list[str]) -> str:
    proc = procs.start(
        CORES, PYTHON, "-m", "serve_app.sim", "--port", "0", "--model", UPSTREAM_MODEL,
        "--max-model-len", "32768", *args,
    )  # fmt: skip
    assert proc.stdout is not None
    return proc.stdout.readline().decode().split()[-1]


@contextmanager
def stack(
    overlay: dict[str, Any] | None, engines: Engines, gateways: Gateways = Gateways()
) -> Iterator[Stack]:
    """Fresh simulators (empty caches and queues), keys for both tenants, the gateways (more
    than one: on a fresh Redis of their own)."""
    procs = Processes()
    with tempfile.TemporaryDirectory(prefix="bench-serving-") as tmp:
        try:
            db_url = f"sqlite:///{tmp}/gateway.db"
            keys = {}
            for tenant in TENANTS:
                _cli(db_url, gateways, "tenants", "create", tenant)
                keys[f"{tenant.upper()}_KEY"] = _cli(
                    db_url, gateways, "keys", "create", "--tenant", tenant, "--name", "bench",
                    "--print-secret-only",
                )  # fmt: skip
            pds = [_start_sim(procs, engines.args(True)) for _ in range(gateways.replicas)]
            colos = [_start_sim(procs, engines.args(False)) for _ in range(gateways.replicas)]
            pd, colo = pds[0], colos[0]
            shared = None
            if gateways.count > 1:
                shared = gateways.sharing(_start_redis(procs, Path(tmp)))
            urls, logs = [], []
            for n in range(gateways.count):
                port = free_port()
                config = gateway_config(pds, colos, db_url, port)
                if shared:
                    config = merged(config, shared)
                if overlay:
                    config = merged(config, overlay)
                path = Path(tmp) / f"gateway-{n}.yaml"
                path.write_text(yaml.safe_dump(config))
                logs.append(Path(tmp) / f"gateway-{n}.log")
                gateway = subprocess.Popen(
                    [PYTHON, "-m", "gateway", "run", "--config", str(path)],
                    stdout=logs[-1].open("wb"), stderr=subprocess.STDOUT, env=gateways.env(),
                )  # fmt: skip
                procs.procs.append(gateway)
                urls.append(f"http://127.0.0.1:{port}")
            for url, log, gateway in zip(urls, logs, procs.procs[-gateways.count :], strict=True):
                wait_http(url + "/healthz", timeout=60)
                if gateway.poll() is not None:
                    raise RuntimeError(log.read_text()[-3000:])
            sims = {"pd": pd, "colocated": colo}
            yield Stack("|".join(u + "/v1" for u in urls), keys, sims, tuple(logs))
        finally:
            procs.stop()


def pd_loadtest(
    s: Stack, out: Path, args: Sequence[str], tenants: Sequence[str] = (), timeout: float = 30
) -> Any:
    """Run pd-loadtest against the gateway; its report.json."""
    cmd = [
        PYTHON, "-m", "loadtests.pdload", "--no-progress", "--no-plots",
        "--target", f"gw={s.url}", "--model", MODEL, "--api-key-env", "QUIET_KEY",
        "--tokenizer", "words", "--timeout", f"{timeout:g}", "--out", str(out), *args,
    ]  # fmt: skip
    for tenant in tenants:
        name, load = tenant.split("=")
        cmd += ["--tenant", f"name={name},key_env={name.upper()}_KEY,load={load}"]
    done = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, **s.keys})
    if done.returncode != 0:
        raise RuntimeError(f"pd-loadtest failed ({done.returncode}): {done.stderr[-2000:]}")
    for n, log in enumerate(s.logs):
        shutil.copyfile(log, out / ("gateway.log" if n == 0 else f"gateway-{n}.log"))
    return json.loads((out / "report.json").read_text())


def _ms(v: float | None) -> str:
    return "-" if v is None else f"{v * 1000:.0f}"


def _pct(v: float | None) -> str:
    return "-" if v is None else f"{v:.0%}"


# --- the experiments ----------------------------------------------------------------------


def cache_experiment(
    overlay: dict[str, Any] | None,
    out: Path,
    quick: bool,
    engines: Engines,
    gateways: Gateways = Gateways(),
) -> list[str]:
    conversations, turns = 16, 6
    requests = conversations * turns * (1 if quick else 2)
    args = [
        "--workload", "multi-turn", "--conversations", str(conversations), "--turns", str(turns),
        "--prefix-tokens", "600", "--input-tokens", "100", "--output-tokens", "24",
        "--rate", f"{4 / engines.scale:g}", "--requests", str(requests), "--arrival", "poisson",
    ]  # fmt: skip
    with stack(overlay, engines, gateways) as s:
        data = pd_loadtest(s, out, args)
    step = data["targets"][0]["steps"][0]
    total = step["summary"]
    rows = [
        f"| all | {total['ok']}/{total['requests']} | {_ms(total['ttft']['p50'])} | "
        f"{_ms(total['ttft']['p99'])} | {_pct(total['prefix_hit_rate'])} | "
        f"{total['prefill_tokens_total']} |"
    ]
    for pool, f in step["by_pool"].items():
        rows.append(
            f"| pool {pool} | {f['ok']} | {_ms(f['ttft']['p50'])} | {_ms(f['ttft']['p99'])} | "
            f"{_pct(f['prefix_hit_rate'])} | {f['prefill_tokens_total']} |"
        )
    for turn, f in step["by_shape"].items():
        rows.append(
            f"| {turn} | {f['ok']} | {_ms(f['ttft']['p50'])} | {_ms(f['ttft']['p99'])} | "
            f"{_pct(f['prefix_hit_rate'])} | {f['prefill_tokens_total']} |"
        )
    head = [
        f"multi-turn: {conversations} conversations x {turns} turns, system 600 + 100 a turn + "
        f"24 an answer (words), Poisson {4 / engines.scale:g} req/s, {requests} requests, "
        f"PD above {THRESHOLD}",
        "",
        "| requests | ok | TTFT p50 ms | TTFT p99 ms | prefix hit | prefill tokens |",
        "|---|---|---|---|---|---|",
    ]
    return head + rows


TENANT_ARGS = ["--workload", "fixed", "--input-tokens", "100", "--output-tokens", "16"]


def tenants_experiment(
    overlay: dict[str, Any] | None,
    out: Path,
    quick: bool,
    engines: Engines,
    gateways: Gateways = Gateways(),
) -> list[str]:
    cap = engines.capacity(16, 100)
    seconds = round((8 if quick else 15) * engines.scale)
    lines = [
        f"fixed 100-token prompts, 16 output tokens; nominal colocated capacity {cap:.1f} req/s; "
        f"quiet offers {0.2 * cap:.1f} req/s, loud {5 * cap:.1f} req/s, {seconds} s of sending, "
        f"{30 * engines.scale:g} s client timeout",
        "",
        "| run | tenant | sent | ok | errors | TTFT p50 ms | TTFT p99 ms |",
        "|---|---|---|---|---|---|---|",
    ]
    runs = (("quiet alone", [f"quiet={0.2 * cap:.3f}"]),
            ("quiet + loud", [f"loud={5 * cap:.3f}", f"quiet={0.2 * cap:.3f}"]))  # fmt: skip
    for label, tenants in runs:
        with stack(overlay, engines, gateways) as s:
            data = pd_loadtest(
                s, out / label.replace(" ", "-"),
                [*TENANT_ARGS, "--rate", "1", "--duration", str(seconds)], tenants,
                timeout=30 * engines.scale,
            )  # fmt: skip
        for name, f in data["targets"][0]["steps"][0]["by_tenant"].items():
            errors = ", ".join(f"{k} {v}" for k, v in sorted(f["errors"].items())) or "0"
            lines.append(
                f"| {label} | {name} | {f['requests']} | {f['ok']} | {errors} | "
                f"{_ms(f['ttft']['p50'])} | {_ms(f['ttft']['p99'])} |"
            )
    return lines


def overload_experiment(
    overlay: dict[str, Any] | None,
    out: Path,
    quick: bool,
    engines: Engines,
    gateways: Gateways = Gateways(),
) -> list[str]:
    cap = engines.capacity(16, 100)
    factors = (0.5, 1.0, 2.0, 3.0) if quick else (0.5, 1.0, 1.5, 2.0, 3.0)
    rates = ",".join(f"{cap * x:.2f}" for x in factors)
    seconds = round((6 if quick else 10) * engines.scale)
    slo_ms = round(1000 * engines.scale)
    with stack(overlay, engines, gateways) as s:
        data = pd_loadtest(
            s, out,
            [*TENANT_ARGS, "--rate", rates, "--duration", str(seconds),
             "--slo-ttft-ms", str(slo_ms)],
            timeout=30 * engines.scale,
        )  # fmt: skip
    lines = [
        f"fixed 100-token prompts, 16 output tokens, {seconds} s a step, SLO TTFT <= {slo_ms} ms; "
        f"nominal colocated capacity {cap:.1f} req/s",
        "",
        "| offered req/s | sent | ok | errors | goodput req/s | TTFT p50 ms | TTFT p99 ms |",
        "|---|---|---|---|---|---|---|",
    ]
    for step in data["targets"][0]["steps"]:
        f = step["summary"]
        errors = ", ".join(f"{k} {v}" for k, v in sorted(f["errors"].items())) or "0"
        lines.append(
            f"| {step['offered']:.1f} | {f['requests']} | {f['ok']} | {errors} | "
            f"{f['goodput_rps']:.2f} | {_ms(f['ttft']['p50'])} | {_ms(f['ttft']['p99'])} |"
        )
    knee = data["targets"][0]["knee"]
    lines += ["", f"knee (goodput within 5% of the best): {knee}"]
    return lines


EXPERIMENTS = {
    "cache": cache_experiment,
    "tenants": tenants_experiment,
    "overload": overload_experiment,
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--experiment", choices=[*EXPERIMENTS, "all"], default="all")
    parser.add_argument("--overlay", type=Path, help="YAML merged into the gateway config")
    parser.add_argument("--baseline", action="store_true", help="with --overlay: run both")
    parser.add_argument("--out", type=Path, default=Path(time.strftime("bench-serving-%H%M%S")))
    parser.add_argument("--quick", action="store_true", help="shorter runs")
    parser.add_argument(
        "--time-scale", type=float, default=1.0, help="multiply every simulated time by this"
    )
    parser.add_argument(
        "--gateways", type=int, default=1, help="gateway processes on one Redis (round robin)"
    )
    parser.add_argument("--tree", type=Path, help="run the gateway from this checkout")
    parser.add_argument(
        "--replicas", type=int, default=1, help="simulated engines per pool (the same each)"
    )
    args = parser.parse_args()
    gateways = Gateways(max(1, args.gateways), args.tree, max(1, args.replicas))
    variants: list[tuple[str, dict[str, Any] | None]] = []
    if args.overlay is None or args.baseline:
        variants.append(("baseline", None))
    if args.overlay is not None:
        variants.append((f"overlay {args.overlay.name}", yaml.safe_load(args.overlay.read_text())))
    names = list(EXPERIMENTS) if args.experiment == "all" else [args.experiment]
    engines = Engines(args.time_scale)
    print(f"PD sim: {' '.join(engines.args(True))}")
    print(f"colocated sim: {' '.join(engines.args(False))}")
    print(
        f"gateways: {gateways.count}, tree {gateways.tree or 'this one'}, "
        f"engines per pool: {gateways.replicas}\n"
    )
    for name in names:
        for label, overlay in variants:
            started = time.monotonic()
            folder = args.out / name / label.split()[0]
            lines = EXPERIMENTS[name](overlay, folder, args.quick, engines, gateways)
            took = time.monotonic() - started
            print(f"### {name}, {label} ({took:.0f} s)\n")
            print("\n".join(lines), "\n", flush=True)


if __name__ == "__main__":
    main()
