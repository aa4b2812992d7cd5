"""Tables and small plots of a loadtests/device/pd-sweep.sh run, for examples/serving/README.md.

    python loadtests/device/sweep_report.py SWEEP_DIR PLOTS_DIR > tables.md

Reads each item's pd-loadtest ``report.json`` (and ``kv_transfers.json``) and writes markdown
tables to stdout, ``pd_vs_colocated.png`` (TTFT and TPOT p50 against concurrency, one panel per
prompt size) and ``rate_sweep.png`` (goodput and TTFT p50 against the offered rate) to PLOTS_DIR.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

CLOSED = (("c128", "128"), ("c2k", "2048"), ("c8k", "8000"))
STYLE = {"pd": ("tab:blue", "-"), "colocated": ("tab:orange", "-"),
         "pd-direct": ("tab:blue", ":"), "colocated-direct": ("tab:orange", ":")}  # fmt: skip


def _load(folder: Path) -> dict[str, Any] | None:
    path = folder / "report.json"
    return json.loads(path.read_text()) if path.is_file() else None


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value * 1000:.1f}"


def _steps(data: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    return [(t["name"], s) for t in data["targets"] for s in t["steps"]]


def table(data: dict[str, Any], prompt: str, load: str) -> list[str]:
    rows = [
        f"| {prompt} | {name} | {s['offered']:g} | {s['summary']['ok']}/{s['summary']['requests']}"
        f" | {_ms(s['summary']['ttft']['p50'])} / {_ms(s['summary']['ttft']['p90'])}"
        f" | {_ms(s['summary']['itl']['p50'])} / {_ms(s['summary']['itl']['p99'])}"
        f" | {_ms(s['summary']['tpot']['p50'])} | {s['summary']['throughput_rps']:.2f}"
        f" | {s['summary']['goodput_rps']:.2f} | {s['summary']['output_tokens_per_s']:.0f} |"
        for name, s in _steps(data)
    ]
    head = (
        f"| prompt tokens | target | {load} | ok/sent | TTFT p50 / p90 ms | ITL p50 / p99 ms"
        " | TPOT p50 ms | req/s | goodput req/s | out tok/s |"
    )
    return [head, "|" + "---|" * 10, *rows, ""]


def gateway_overhead(data: dict[str, Any]) -> list[str]:
    """TTFT p50 through the gateway minus direct to the Ray ingress, same run, same load."""
    by = {(name, s["offered"]): s["summary"] for name, s in _steps(data)}
    lines = [
        "| pool | concurrency | TTFT p50 gateway / direct ms | added ms | e2e p50 gateway / direct"
        " ms | added ms |",
        "|---|---|---|---|---|---|",
    ]
    for pool in ("pd", "colocated"):
        for (name, load), gw in sorted(by.items(), key=lambda kv: (kv[0][0], kv[0][1])):
            direct = by.get((f"{pool}-direct", load))
            if name != pool or direct is None:
                continue
            cells = []
            for metric in ("ttft", "e2e"):
                g, d = gw[metric]["p50"], direct[metric]["p50"]
                added = "-" if g is None or d is None else f"{(g - d) * 1000:+.1f}"
                cells += [f"{_ms(g)} / {_ms(d)}", added]
            lines.append(f"| {pool} | {load:g} | " + " | ".join(cells) + " |")
    return [*lines, ""]


def _kv_row(label: str, each: list[list[float]]) -> str:
    if not each:
        return f"| {label} | 0 | - | - | - |"
    ms = sorted(e[1] for e in each)
    mib = sorted(e[0] / 2**20 for e in each)
    rate = sum(e[0] for e in each) / sum(e[1] for e in each) / 1e3  # MB/s
    return (
        f"| {label} | {len(each)} | {mib[len(mib) // 2]:.0f} | "
        f"{ms[len(ms) // 2]:.0f} / {ms[min(len(ms) - 1, int(0.9 * len(ms)))]:.0f} / "
        f"{ms[0]:.0f} | {rate:.0f} |"
    )


def kv_table(sweep: Path, reports: dict[str, dict[str, Any]]) -> list[str]:
    """Every transfer of an item, and its first ones: the PD target's warm-up and its
    concurrency-1 step, which run before anything else and so transfer alone."""
    lines = [
        "| item | transfers | MiB each (p50) | ms p50 / p90 / min | MB/s per transfer |",
        "|---|---|---|---|---|",
    ]
    for item, prompt in (*CLOSED, ("r2k", "2048")):
        path = sweep / item / "kv_transfers.json"
        if not path.is_file():
            continue
        each = json.loads(path.read_text())["each"]
        pd = next(t for t in reports[item]["targets"] if t["name"] == "pd")
        alone = 2 + pd["steps"][0]["summary"]["ok"]  # warm-up + the first (lowest-load) step
        lines.append(_kv_row(f"{prompt}-token prompts, alone", each[:alone]))
        lines.append(_kv_row(f"{prompt}-token prompts, all loads", each))
    return [*lines, ""]


def plot_closed(reports: dict[str, dict[str, Any]], path: Path) -> None:
    present = [(item, prompt) for item, prompt in CLOSED if item in reports]
    if not present:
        return
    fig, axes = plt.subplots(2, len(present), figsize=(3.2 * len(present), 5), squeeze=False)
    for col, (item, prompt) in enumerate(present):
        for t in reports[item]["targets"]:
            color, line = STYLE.get(t["name"], ("gray", "-"))
            xs = [s["offered"] for s in t["steps"]]
            for row, metric in enumerate(("ttft", "tpot")):
                ys = [(s["summary"][metric]["p50"] or 0) * 1000 for s in t["steps"]]
                axes[row][col].plot(xs, ys, line, marker="o", ms=3, color=color, label=t["name"])
        axes[0][col].set_title(f"{prompt}-token prompts", fontsize=9)
        for row, label in enumerate(("TTFT p50 (ms)", "TPOT p50 (ms)")):
            ax = axes[row][col]
            ax.set_xscale("log", base=2)
            if row == 0:
                ax.set_yscale("log")  # PD's TTFT spans three decades
            ax.tick_params(labelsize=7)
            ax.set_ylabel(label if col == 0 else "", fontsize=8)
            ax.set_xlabel("concurrency" if row == 1 else "", fontsize=8)
    axes[0][0].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=80)
    plt.close(fig)


def plot_rate(data: dict[str, Any], path: Path) -> None:
    fig, axes = plt.subplots(1, 2, figsize=(7, 2.8))
    for t in data["targets"]:
        color, line = STYLE.get(t["name"], ("gray", "-"))
        xs = [s["offered"] for s in t["steps"]]
        axes[0].plot(xs, [s["summary"]["goodput_rps"] for s in t["steps"]], line, marker="o",
                     ms=3, color=color, label=t["name"])  # fmt: skip
        axes[1].plot(xs, [(s["summary"]["ttft"]["p50"] or 0) * 1000 for s in t["steps"]], line,
                     marker="o", ms=3, color=color)  # fmt: skip
        if t.get("knee") is not None:
            axes[0].axvline(t["knee"], color=color, alpha=0.3)
    axes[0].set_ylabel("goodput (req/s)", fontsize=8)
    axes[1].set_ylabel("TTFT p50 (ms)", fontsize=8)
    axes[1].set_yscale("log")
    for ax in axes:
        ax.set_xscale("log", base=2)
        ax.set_xlabel("offered rate (req/s, Poisson)", fontsize=8)
        ax.tick_params(labelsize=7)
    axes[0].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=80)
    plt.close(fig)


def main(sweep: Path, plots: Path) -> None:
    plots.mkdir(parents=True, exist_ok=True)
    reports = {item: d for item in ("c128", "c2k", "c8k", "r2k") if (d := _load(sweep / item))}
    out: list[str] = []
    for item, prompt in CLOSED:
        if item in reports:
            out += table(reports[item], prompt, "concurrency")
    if "c128" in reports:
        out += ["Gateway's added latency (c128):", "", *gateway_overhead(reports["c128"])]
    if "r2k" in reports:
        out += table(reports["r2k"], "2048", "rate req/s")
        knees = [f"{t['name']} {t['knee']}" for t in reports["r2k"]["targets"]]
        out += [f"Knees: {', '.join(knees)}", ""]
        plot_rate(reports["r2k"], plots / "rate_sweep.png")
    out += ["KV transfers (decode's log):", "", *kv_table(sweep, reports)]
    plot_closed(reports, plots / "pd_vs_colocated.png")
    print("\n".join(out))


if __name__ == "__main__":
    main(Path(sys.argv[1]), Path(sys.argv[2]))
