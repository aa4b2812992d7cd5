"""The P/D decision measured on the capacity simulator (issue 38): goodput under an SLO of the
latency-predicted decision against the fixed threshold, each pool alone and the hand-tuned
``saturation.max_starting: 1`` spill, in two hardware cases, over a rate sweep.

The pools are the project's simulator (serve_app/sim with ``--capacity``), not engines: one PD
process and one colocated process, each an engine with a bounded batch and an FCFS queue.

- ``slow-link`` (today's H200 over TCP): both engines alike, PD's first token also waits for
  its KV link, 1 ms per prompt token, one transfer at a time.
- ``stalled-colocated``: the colocated engine's prefill costs 0.6 ms a token, and each long
  prefill stalls the decode steps of its whole batch; PD's link is fast (0.05 ms a token, any
  number at once) and its prefill does not stall its decode (0.05 ms a token: the simulator's
  PD pool is one engine, so prefill on a separate engine is modelled as a cheap one there).

Every target is a model of one gateway, each with pools of its own (the same two simulators
behind them), so what one target teaches its pools' latency models no other reads; between
targets both simulators' prefix caches are emptied. The workload: half 32-word, half 600-word
prompts (pd-loadtest's ``mix``, its ``words`` tokenizer), 24 output tokens, Poisson, SLO TTFT
<= 1000 ms and TPOT <= 50 ms (the gateway's standard band has the same objective); 40
warm-up requests per target first (closed loop, 4 at once: enough for every pool's models
to be confident, 16 samples each, before the sweep). No
saturation bound is set but the spill target's. The threshold is 256 tokens: every long
prompt goes to PD, every short one to colocated::

    flock /tmp/heavy.lock .venv/bin/python loadtests/bench_pd_decision.py --case slow-link
    flock /tmp/heavy.lock .venv/bin/python loadtests/bench_pd_decision.py --case stalled-colocated
    # --rates 1,2,4,6,8,12 --seconds 8 --out DIR (every report.json and the gateway's metrics)
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import yaml
from bench_overhead import Processes, free_port, wait_http
from bench_serving import _start_sim

PYTHON = sys.executable
UPSTREAM_MODEL = "sim-model"
THRESHOLD = 256
SLO = {"ttft_ms": 1000, "tpot_ms": 50}
COMMON = [
    "--capacity", "--max-num-seqs", "8", "--max-num-batched-tokens", "2048", "--block-size", "16",
    "--num-gpu-blocks-override", "4096", "--step-ms", "15", "--decode-per-seq-ms", "1",
]  # fmt: skip
CASES: dict[str, tuple[list[str], list[str]]] = {  # (PD's args, colocated's)
    "slow-link": (
        [*COMMON, "--prefill-per-token-ms", "0.2", "--kv-transfer-per-token-ms", "1",
         "--kv-transfer-parallel", "1"],
        [*COMMON, "--prefill-per-token-ms", "0.2"],
    ),
    "stalled-colocated": (
        [*COMMON, "--prefill-per-token-ms", "0.05", "--kv-transfer-per-token-ms", "0.05",
         "--kv-transfer-parallel", "0"],
        [*COMMON, "--prefill-per-token-ms", "0.6"],
    ),
}  # fmt: skip
TARGETS = {  # name -> (PD pool?, colocated pool?, latency mode, PD saturation)
    "predicted": (True, True, "decide", None),
    "fixed": (True, True, "shadow", None),
    "spill": (True, True, "off", {"max_starting": 1}),
    "pd-only": (True, False, "shadow", None),
    "colocated-only": (False, True, "shadow", None),
}


def gateway_config(pd: str, colo: str, db_url: str, port: int) -> dict[str, Any]:
    timeouts = {"first_byte": 120, "idle": 120}
    pools: dict[str, Any] = {}
    models: dict[str, Any] = {}
    for name, (has_pd, has_colo, mode, saturation) in TARGETS.items():
        roles = {}
        if has_pd:
            pools[f"{name}-pd"] = {"urls": [pd], "timeouts": timeouts}
            if saturation:
                pools[f"{name}-pd"]["saturation"] = saturation
            roles["pd"] = f"{name}-pd"
        if has_colo:
            pools[f"{name}-co"] = {"urls": [colo], "timeouts": timeouts}
            roles["colocated"] = f"{name}-co"
        models[name] = {
            "upstream_model": UPSTREAM_MODEL,
            "routing": {"pd_threshold_tokens": THRESHOLD, "latency": {"mode": mode}},
            "variants": {"stable": {"weight": 1, "pools": roles}},
        }
    return {
        "server": {"host": "127.0.0.1", "port": port, "access_log": False},
        "storage": {"url": db_url},
        "auth": {"enabled": False},
        "limits": {"defaults": {"concurrent_requests": 100_000, "tokens_per_minute": 10**12}},
        "slo": {"bands": {"standard": dict(SLO)}},
        "pools": pools,
        "models": models,
    }


@contextmanager
def stack(case: str) -> Iterator[tuple[str, dict[str, str]]]:
    procs = Processes()
    with tempfile.TemporaryDirectory(prefix="bench-pd-decision-") as tmp:
        try:
            pd_args, colo_args = CASES[case]
            pd, colo = _start_sim(procs, pd_args), _start_sim(procs, colo_args)
            port = free_port()
            path = Path(tmp) / "gateway.yaml"
            config = gateway_config(pd, colo, f"sqlite:///{tmp}/gateway.db", port)
            path.write_text(yaml.safe_dump(config))
            log = (Path(tmp) / "gateway.log").open("wb")
            gateway = subprocess.Popen(
                [PYTHON, "-m", "gateway", "run", "--config", str(path)],
                stdout=log, stderr=subprocess.STDOUT,
            )  # fmt: skip
            procs.procs.append(gateway)
            url = f"http://127.0.0.1:{port}"
            wait_http(url + "/healthz", timeout=60)
            yield url, {"pd": pd, "colocated": colo}
        finally:
            procs.stop()


def _post(url: str) -> None:
    urllib.request.urlopen(urllib.request.Request(url, data=b"", method="POST"), timeout=10)


def prediction_metrics(url: str) -> dict[tuple[str, str], float]:
    """(pool, quantity) -> the gateway's mean absolute percentage error of that model."""
    text = urllib.request.urlopen(url + "/metrics", timeout=10).read().decode()
    found = {}
    for line in text.splitlines():
        if line.startswith("gateway_latency_prediction_error_mean{"):
            labels, value = line[line.index("{") + 1 :].split("} ")
            parts = dict(p.split("=") for p in labels.split(","))
            found[(parts["pool"].strip('"'), parts["quantity"].strip('"'))] = float(value)
    return found


def run_target(
    url: str, sims: dict[str, str], name: str, rates: str, seconds: float, out: Path
) -> Any:
    for sim in sims.values():  # every target starts on cold caches
        _post(sim + "/reset_prefix_cache")
    cmd = [
        PYTHON, "-m", "loadtests.pdload", "--no-progress", "--no-plots",
        "--target", f"name={name},url={url}/v1,model={name}", "--tokenizer", "words",
        "--workload", "mix", "--short-tokens", "32", "--long-tokens", "600",
        "--long-fraction", "0.5", "--output-tokens", "24", "--ignore-eos", "--warmup", "40",
        "--arrival", "poisson",
        "--rate", rates, "--duration", f"{seconds:g}", "--timeout", "30",
        "--slo-ttft-ms", str(SLO["ttft_ms"]), "--slo-tpot-ms", str(SLO["tpot_ms"]),
        "--out", str(out / name),
    ]  # fmt: skip
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"pd-loadtest failed ({done.returncode}): {done.stderr[-2000:]}")
    return json.loads((out / name / "report.json").read_text())


def _pct(v: float | None) -> str:
    return "-" if v is None else f"{100 * v:.0f}%"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--case", choices=list(CASES), required=True)
    parser.add_argument("--rates", default="1,2,4,6,8,12")
    parser.add_argument("--seconds", type=float, default=8.0)
    parser.add_argument("--targets", default=",".join(TARGETS))
    parser.add_argument("--out", type=Path, default=Path(time.strftime("bench-pd-decision-%H%M%S")))
    args = parser.parse_args()
    pd_args, colo_args = CASES[args.case]
    print(f"case {args.case}\nPD sim: {' '.join(pd_args)}\ncolocated sim: {' '.join(colo_args)}")
    print(f"load average before: {os.getloadavg()[0]:.1f}\n", flush=True)
    goodput: dict[str, dict[float, float]] = {}
    rows = []
    with stack(args.case) as (url, sims):
        for name in args.targets.split(","):
            started = time.monotonic()
            data = run_target(url, sims, name, args.rates, args.seconds, args.out)
            errors = prediction_metrics(url)
            for step in data["targets"][0]["steps"]:
                f = step["summary"]
                goodput.setdefault(name, {})[step["offered"]] = f["goodput_rps"]
                pools = ", ".join(
                    f"{pool.split('-')[-1]} {p['requests']}" for pool, p in step["by_pool"].items()
                )
                mape = {
                    pool.split("-")[-1]: _pct((p.get("ttft_prediction") or {}).get("mape"))
                    for pool, p in step["by_pool"].items()
                }
                refused = sum(v for k, v in f["errors"].items())
                rows.append(
                    f"| {name} | {step['offered']:g} | {f['requests']} | {refused} | "
                    f"{f['goodput_rps']:.2f} | {1000 * (f['ttft']['p50'] or 0):.0f} | "
                    f"{1000 * (f['tpot']['p50'] or 0):.0f} | {pools} | "
                    f"{', '.join(f'{k} {v}' for k, v in mape.items())} |"
                )
            tpot = ", ".join(
                f"{pool.split('-')[-1]} TTFT {_pct(errors.get((pool, 'ttft')))} "
                f"TPOT {_pct(errors.get((pool, 'tpot')))}"
                for pool in sorted({p for p, _ in errors})
                if pool.startswith(name + "-")
            )
            took = time.monotonic() - started
            print(f"{name}: {took:.0f} s; gateway MAPE {tpot or '-'}; "
                  f"load {os.getloadavg()[0]:.1f}", flush=True)  # fmt: skip
    print("\n| target | offered req/s | sent | errors | goodput req/s | TTFT p50 ms | TPOT p50 ms "
          "| requests per pool | TTFT MAPE (client) |")  # fmt: skip
    print("|---|---|---|---|---|---|---|---|---|")
    print("\n".join(rows))
    print(
        "\n| offered | predicted | fixed | spill | pd-only | colocated-only "
        "| predicted / best single |"
    )
    print("|---|---|---|---|---|---|---|")
    for rate in sorted(goodput.get("predicted", {})):
        g = {n: goodput.get(n, {}).get(rate) for n in TARGETS}
        singles = [v for v in (g["pd-only"], g["colocated-only"]) if v is not None]
        best = max(singles) if singles else None
        ratio = "-" if not best or g["predicted"] is None else f"{g['predicted'] / best:.2f}"
        cells = " | ".join("-" if v is None else f"{v:.2f}" for v in g.values())
        print(f"| {rate:g} | {cells} | {ratio} |")
    print(f"\nload average after: {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
