"""A batch on idle capacity (issue 39): interactive TTFT with and without a large batch running
through the same gateway, the batch's time to finish, and the pool's utilisation over time.

The pool is the project's simulator (serve_app/sim with ``--capacity``), not an engine: one
engine with a bounded batch (``--max-num-seqs``) and an FCFS waiting queue. The gateway has
flow control on and the pool's ``capacity`` set to the engine's batch, so interactive requests
past it wait in the gateway's queue and batch lines (the sheddable band) run only on the places
interactive traffic leaves.

1. Capacity: pd-loadtest closed loop at twice the engine's batch, through the gateway; its
   throughput is the capacity (req/s) the interactive rate is a fraction of.
2. ``alone``: a fresh stack, Poisson interactive load at ``--load`` (0.7) of capacity.
3. ``with batch``: a fresh stack, a ``--lines`` batch uploaded and created through the Batch API,
   the same interactive load started once the first lines run; then the batch is waited for.

Every half second the simulator's ``vllm:num_requests_running``/``waiting`` and the gateway's
``gateway_pool_in_flight``, ``gateway_batch_lines_running``/``queued`` are sampled; the report
gives their means while the interactive load ran and while the batch ran alone::

    flock /tmp/heavy.lock .venv/bin/python loadtests/bench_batch.py --lines 5000
    # --seconds 60 --load 0.7 --concurrency 8 --headroom 1 --time-scale 1 --out DIR
    #   (--out keeps both report.json and the samples)
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import orjson
import yaml
from bench_overhead import Processes, free_port, wait_http
from bench_serving import _start_sim

PYTHON = sys.executable
MODEL = "chat"
UPSTREAM_MODEL = "sim-model"
INPUT_WORDS = 100
OUTPUT_TOKENS = 16
FINAL = ("completed", "failed", "expired", "cancelled")


@dataclass(frozen=True)
class Engine:
    """The simulated engine; ``scale`` multiplies every simulated time."""

    seqs: int = 16
    scale: float = 1.0

    def args(self) -> list[str]:
        ms = {"--step-ms": 6, "--prefill-per-token-ms": 0.02, "--decode-per-seq-ms": 0.25}
        timed = [part for k, v in ms.items() for part in (k, f"{v * self.scale:g}")]
        return [
            "--capacity", "--max-num-seqs", str(self.seqs), "--max-num-batched-tokens", "4096",
            "--block-size", "16", "--num-gpu-blocks-override", "8192", *timed,
        ]  # fmt: skip


def gateway_config(sim: str, db_url: str, port: int, engine: Engine, args: Any) -> dict[str, Any]:
    timeouts = {"first_byte": 120, "idle": 120}
    batches: dict[str, Any] = {"concurrency": args.concurrency, "poll_seconds": 0.05}
    if args.headroom is not None:
        batches["headroom"] = args.headroom
    return {
        "server": {"host": "127.0.0.1", "port": port, "access_log": False},
        "storage": {"url": db_url},
        "auth": {"enabled": False},
        "limits": {"defaults": {"concurrent_requests": 100_000, "tokens_per_minute": 10**12}},
        "flow": {"enabled": True, "max_queued": 4096, "max_wait_seconds": 60},
        "accounting": {"ledger_interval": 0.2},
        "batches": batches,
        "pools": {"colocated": {"urls": [sim], "timeouts": timeouts, "capacity": engine.seqs}},
        "models": {
            MODEL: {
                "upstream_model": UPSTREAM_MODEL,
                "variants": {"stable": {"weight": 1, "pools": {"colocated": "colocated"}}},
            }
        },
    }


@dataclass(frozen=True)
class Stack:
    url: str
    sim: str
    log: Path


@contextmanager
def stack(engine: Engine, args: Any) -> Iterator[Stack]:
    procs = Processes()
    with tempfile.TemporaryDirectory(prefix="bench-batch-") as tmp:
        try:
            sim = _start_sim(procs, engine.args())
            port = free_port()
            path = Path(tmp) / "gateway.yaml"
            config = gateway_config(sim, f"sqlite:///{tmp}/gateway.db", port, engine, args)
            path.write_text(yaml.safe_dump(config))
            log = Path(tmp) / "gateway.log"
            gateway = subprocess.Popen(
                [PYTHON, "-m", "gateway", "run", "--config", str(path)],
                stdout=log.open("wb"), stderr=subprocess.STDOUT,
            )  # fmt: skip
            procs.procs.append(gateway)
            url = f"http://127.0.0.1:{port}"
            wait_http(url + "/healthz", timeout=60)
            if gateway.poll() is not None:
                raise RuntimeError(log.read_text()[-3000:])
            yield Stack(url, sim, log)
        finally:
            procs.stop()


def pd_loadtest(s: Stack, out: Path, load: list[str], timeout: float) -> Any:
    cmd = [
        PYTHON, "-m", "loadtests.pdload", "--no-progress", "--no-plots",
        "--target", f"gw={s.url}/v1", "--model", MODEL, "--tokenizer", "words",
        "--workload", "fixed", "--input-tokens", str(INPUT_WORDS),
        "--output-tokens", str(OUTPUT_TOKENS), "--ignore-eos",
        "--timeout", f"{timeout:g}", "--out", str(out), *load,
    ]  # fmt: skip
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"pd-loadtest failed ({done.returncode}): {done.stderr[-2000:]}")
    return json.loads((out / "report.json").read_text())


# --- sampling -----------------------------------------------------------------------------

WATCHED = (
    "vllm:num_requests_running",
    "vllm:num_requests_waiting",
    "gateway_pool_in_flight",
    "gateway_batch_lines_running",
    "gateway_batch_lines_queued",
    "gateway_batch_lines_in_flight",
    "gateway_flow_queue_depth",
)


def read_metrics(url: str) -> dict[str, float]:
    """The watched series of one /metrics text, summed over their labels."""
    text = urllib.request.urlopen(url + "/metrics", timeout=5).read().decode()
    found: dict[str, float] = {}
    for line in text.splitlines():
        if line.startswith("#"):
            continue
        name = line.split("{", 1)[0].split(" ", 1)[0]
        if name in WATCHED:
            found[name] = found.get(name, 0.0) + float(line.rsplit(" ", 1)[1])
    return found


@dataclass
class Sampler:
    s: Stack
    every: float = 0.5
    samples: list[dict[str, float]] = field(default_factory=list)
    marks: dict[str, float] = field(default_factory=dict)
    _stop: threading.Event = field(default_factory=threading.Event)

    def __post_init__(self) -> None:
        self.started = time.monotonic()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(self.every):
            try:
                sample = {"t": time.monotonic() - self.started}
                sample |= read_metrics(self.s.sim)
                sample |= read_metrics(self.s.url)
                self.samples.append(sample)
            except OSError:
                pass

    def mark(self, name: str) -> None:
        self.marks[name] = time.monotonic() - self.started

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()

    def mean(self, name: str, start: str, end: str) -> float | None:
        lo, hi = self.marks.get(start), self.marks.get(end)
        if lo is None or hi is None:
            return None
        values = [x.get(name, 0.0) for x in self.samples if lo <= x["t"] <= hi]
        return sum(values) / len(values) if values else None


# --- the batch ----------------------------------------------------------------------------


def requests_file(lines: int) -> bytes:
    words = " ".join(f"b{i % 97}" for i in range(INPUT_WORDS - 4))
    out = bytearray()
    for i in range(lines):
        body = {
            "model": MODEL,
            "messages": [{"role": "user", "content": f"line {i} {words}"}],
            "max_tokens": OUTPUT_TOKENS,
            "ignore_eos": True,
        }
        line = {"custom_id": f"l{i}", "method": "POST", "url": "/v1/chat/completions"}
        out += orjson.dumps({**line, "body": body}) + b"\n"
    return bytes(out)


def create_batch(client: httpx.Client, lines: int) -> str:
    files = {"file": ("batch.jsonl", requests_file(lines), "application/jsonl")}
    uploaded = client.post("/v1/files", data={"purpose": "batch"}, files=files)
    uploaded.raise_for_status()
    created = client.post(
        "/v1/batches",
        json={
            "input_file_id": uploaded.json()["id"],
            "endpoint": "/v1/chat/completions",
            "completion_window": "24h",
        },
    )
    created.raise_for_status()
    batch_id: str = created.json()["id"]
    return batch_id


def counts(client: httpx.Client, batch_id: str) -> tuple[str, dict[str, int]]:
    batch = client.get(f"/v1/batches/{batch_id}").json()
    return batch["status"], batch["request_counts"]


# --- the runs -----------------------------------------------------------------------------


def capacity(engine: Engine, args: Any, out: Path) -> float:
    with stack(engine, args) as s:
        seconds = f"{max(10.0, args.seconds / 3):g}"
        load = ["--concurrency", str(2 * engine.seqs), "--duration", seconds, "--warmup", "8"]
        data = pd_loadtest(s, out / "capacity", load, timeout=120 * engine.scale)
    rps: float = data["targets"][0]["steps"][0]["summary"]["throughput_rps"]
    return rps


def interactive(s: Stack, rate: float, args: Any, out: Path) -> Any:
    load = ["--rate", f"{rate:.3f}", "--arrival", "poisson", "--duration", f"{args.seconds:g}"]
    data = pd_loadtest(s, out, load, timeout=120)
    return data["targets"][0]["steps"][0]["summary"]


def _ms(v: float | None) -> str:
    return "-" if v is None else f"{1000 * v:.0f}"


def _f(v: float | None) -> str:
    return "-" if v is None else f"{v:.1f}"


def run(engine: Engine, rate: float, with_batch: bool, args: Any, out: Path) -> dict[str, Any]:
    label = "with-batch" if with_batch else "alone"
    with stack(engine, args) as s, httpx.Client(base_url=s.url, timeout=120) as client:
        sampler = Sampler(s)
        batch_id = None
        if with_batch:
            created = time.monotonic()
            batch_id = create_batch(client, args.lines)
            print(f"  batch of {args.lines} created in {time.monotonic() - created:.1f} s")
            while counts(client, batch_id)[1]["completed"] < 1:
                time.sleep(0.2)
            sampler.mark("batch_started")
        sampler.mark("load_start")
        summary = interactive(s, rate, args, out / label)
        sampler.mark("load_end")
        result: dict[str, Any] = {"label": label, "summary": summary}
        if batch_id is not None:
            status, at_end = counts(client, batch_id)
            result["batch_done_during_load"] = at_end["completed"] + at_end["failed"]
            deadline = time.monotonic() + args.batch_timeout
            while status not in FINAL and time.monotonic() < deadline:
                time.sleep(1)
                status, final = counts(client, batch_id)
            sampler.mark("batch_end")
            _, final = counts(client, batch_id)
            result |= {
                "batch_status": status,
                "batch_counts": final,
                "batch_seconds": sampler.marks["batch_end"] - sampler.marks["batch_started"],
                "batch_alone_seconds": sampler.marks["batch_end"] - sampler.marks["load_end"],
            }
        sampler.stop()
        for name in WATCHED:
            result[f"mean {name} (load)"] = sampler.mean(name, "load_start", "load_end")
            if batch_id is not None:
                result[f"mean {name} (batch alone)"] = sampler.mean(name, "load_end", "batch_end")
        (out / label).mkdir(parents=True, exist_ok=True)
        (out / label / "samples.json").write_text(
            json.dumps({"marks": sampler.marks, "samples": sampler.samples})
        )
        return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--lines", type=int, default=50_000)
    parser.add_argument("--seconds", type=float, default=60.0, help="interactive sending time")
    parser.add_argument("--load", type=float, default=0.7, help="interactive rate / capacity")
    parser.add_argument("--seqs", type=int, default=16, help="the engine's --max-num-seqs")
    parser.add_argument("--concurrency", type=int, default=8, help="batches.concurrency")
    parser.add_argument("--headroom", type=int, help="batches.headroom (default: the gateway's)")
    parser.add_argument("--time-scale", type=float, default=1.0)
    parser.add_argument("--capacity", type=float, help="req/s: skip measuring it")
    parser.add_argument("--batch-timeout", type=float, default=3600.0)
    parser.add_argument("--out", type=Path, default=Path(time.strftime("bench-batch-%H%M%S")))
    args = parser.parse_args()
    engine = Engine(args.seqs, args.time_scale)
    print(f"sim: {' '.join(engine.args())}")
    print(f"batches.concurrency {args.concurrency}, headroom {args.headroom}, lines {args.lines}")
    print(f"load average before: {' '.join(f'{x:.2f}' for x in os.getloadavg())}", flush=True)
    cap = args.capacity or capacity(engine, args, args.out)
    rate = args.load * cap
    print(f"capacity {cap:.1f} req/s (closed loop, {2 * engine.seqs} at once); "
          f"interactive {rate:.1f} req/s for {args.seconds:g} s", flush=True)  # fmt: skip
    results = []
    for with_batch in (False, True):
        started = time.monotonic()
        result = run(engine, rate, with_batch, args, args.out)
        results.append(result)
        f = result["summary"]
        print(f"{result['label']}: {time.monotonic() - started:.0f} s; TTFT p50 "
              f"{_ms(f['ttft']['p50'])} p99 {_ms(f['ttft']['p99'])} ms; "
              f"load {os.getloadavg()[0]:.2f}", flush=True)  # fmt: skip
    (args.out / "results.json").write_text(json.dumps(results, indent=1))
    alone, with_b = results
    print("\n| run | sent | ok | errors | req/s | TTFT p50 ms | TTFT p90 ms | TTFT p99 ms "
          "| TPOT p50 ms | engine running (mean) | engine waiting | gateway queue "
          "| batch lines running |")  # fmt: skip
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for r in results:
        f = r["summary"]
        errors = ", ".join(f"{k} {v}" for k, v in sorted(f["errors"].items())) or "0"
        print(
            f"| {r['label']} | {f['requests']} | {f['ok']} | {errors} | "
            f"{f['throughput_rps']:.1f} | {_ms(f['ttft']['p50'])} | {_ms(f['ttft']['p90'])} | "
            f"{_ms(f['ttft']['p99'])} | {_ms(f['tpot']['p50'])} | "
            f"{_f(r['mean vllm:num_requests_running (load)'])} | "
            f"{_f(r['mean vllm:num_requests_waiting (load)'])} | "
            f"{_f(r['mean gateway_flow_queue_depth (load)'])} | "
            f"{_f(r['mean gateway_batch_lines_running (load)'])} |"
        )
    p99 = (with_b["summary"]["ttft"]["p99"] or 0) / (alone["summary"]["ttft"]["p99"] or 1)
    print(f"\nTTFT p99 with the batch / alone: {p99:.2f} (goal <= 1.10)")
    print(
        f"batch: {with_b['batch_status']} {with_b['batch_counts']} in "
        f"{with_b['batch_seconds']:.0f} s ({with_b['batch_done_during_load']} lines during the "
        f"{args.seconds:g} s of interactive load, the rest in "
        f"{with_b['batch_alone_seconds']:.0f} s alone); engine running while alone "
        f"{_f(with_b['mean vllm:num_requests_running (batch alone)'])} of {engine.seqs}"
    )
    print(f"load average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()
