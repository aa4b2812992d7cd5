"""PNG plots of a report, every target in the same axes so runs compare side by side.

matplotlib with the non-interactive Agg backend: it renders PNGs with no display and no browser,
and it is the plotting library everyone who reads these plots already has.

- ``latency_cdf.png``: CDFs of TTFT, ITL and end-to-end latency, one line per target and load;
- ``latency_vs_load.png``: TTFT and ITL (p50 solid, p99 dashed) against offered load;
- ``throughput_vs_load.png``: throughput and goodput against offered load, the knee marked;
- ``per_pool.png``: requests, TTFT p50 and end-to-end p50 per pool, per target.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
from matplotlib.axes import Axes

PLOTS = ("latency_cdf.png", "latency_vs_load.png", "throughput_vs_load.png", "per_pool.png")


def _load_label(data: dict[str, Any]) -> str:
    return "offered rate (req/s)" if data["meta"]["mode"] == "open" else "concurrency"


def _cdf(ax: Axes, values: list[float], label: str, color: str, alpha: float) -> None:
    if not values:
        return
    ordered = sorted(v * 1000 for v in values)
    ys = [(i + 1) / len(ordered) for i in range(len(ordered))]
    ax.step(ordered, ys, where="post", label=label, color=color, alpha=alpha)


def latency_cdf(data: dict[str, Any], path: Path) -> None:
    fig, axes = plt.subplots(1, 3, figsize=(15, 4.5))
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for t_index, target in enumerate(data["targets"]):
        color = colors[t_index % len(colors)]
        steps = target["steps"]
        for s_index, step in enumerate(steps):
            ok = [
                r
                for r in data["requests"]
                if r["target"] == target["name"]
                and r["step"] == step["step"]
                and r["error"] is None
            ]
            alpha = 0.35 + 0.65 * (s_index + 1) / len(steps)
            label = f"{target['name']} @ {step['offered']:g}"
            _cdf(axes[0], [r["ttft"] for r in ok if r["ttft"] is not None], label, color, alpha)
            _cdf(axes[1], [x for r in ok for x in r["itls"]], label, color, alpha)
            _cdf(axes[2], [r["e2e"] for r in ok], label, color, alpha)
    for ax, name in zip(axes, ("TTFT", "inter-token latency", "end-to-end latency"), strict=True):
        ax.set_xlabel(f"{name} (ms)")
        ax.set_ylabel(
            "fraction of requests" if name != "inter-token latency" else "fraction of gaps"
        )
        ax.set_xscale("symlog", linthresh=1.0)
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize="small")
    fig.suptitle("Latency CDFs (darker = higher load)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _series(target: dict[str, Any], *keys: str) -> tuple[list[float], list[float | None]]:
    xs = [s["offered"] for s in target["steps"]]
    ys: list[float | None] = []
    for s in target["steps"]:
        value: Any = s["summary"]
        for key in keys:
            value = value[key]
        ys.append(None if value is None else value)
    return xs, ys


def _plot(ax: Axes, xs: list[float], ys: list[float | None], scale: float, **kwargs: Any) -> None:
    points = [(x, y * scale) for x, y in zip(xs, ys, strict=True) if y is not None]
    if points:
        ax.plot([p[0] for p in points], [p[1] for p in points], marker="o", **kwargs)


def latency_vs_load(data: dict[str, Any], path: Path) -> None:
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.5))
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for i, target in enumerate(data["targets"]):
        color = colors[i % len(colors)]
        for ax, metric in zip(axes, ("ttft", "itl"), strict=True):
            for pct, style in (("p50", "-"), ("p99", "--")):
                xs, ys = _series(target, metric, pct)
                _plot(
                    ax, xs, ys, 1000, color=color, linestyle=style, label=f"{target['name']} {pct}"
                )
    for ax, name in zip(axes, ("TTFT (ms)", "inter-token latency (ms)"), strict=True):
        ax.set_xlabel(_load_label(data))
        ax.set_ylabel(name)
        ax.grid(alpha=0.3)
        ax.legend(fontsize="small")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def throughput_vs_load(data: dict[str, Any], path: Path) -> None:
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.5))
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for i, target in enumerate(data["targets"]):
        color = colors[i % len(colors)]
        xs, thr = _series(target, "throughput_rps")
        _, good = _series(target, "goodput_rps")
        _plot(axes[0], xs, thr, 1, color=color, label=f"{target['name']} throughput")
        _plot(axes[0], xs, good, 1, color=color, linestyle="--", label=f"{target['name']} goodput")
        _, tokens = _series(target, "output_tokens_per_s")
        _plot(axes[1], xs, tokens, 1, color=color, label=target["name"])
        if target["knee"] is not None:
            axes[0].axvline(target["knee"], color=color, alpha=0.4, linestyle=":")
    axes[0].set_ylabel("requests/s (dashed: within the SLO)")
    axes[1].set_ylabel("output tokens/s")
    for ax in axes:
        ax.set_xlabel(_load_label(data))
        ax.grid(alpha=0.3)
        ax.legend(fontsize="small")
    fig.suptitle(f"Throughput and goodput (SLO: {data['meta']['slo']}; dotted: knee)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def per_pool(data: dict[str, Any], path: Path) -> None:
    """Per target and pool, over every step: requests, TTFT p50 and e2e p50 as grouped bars."""
    from loadtests.pdload.records import RequestRecord
    from loadtests.pdload.stats import Slo, summarize

    fig, axes = plt.subplots(1, 3, figsize=(15, 4.5))
    groups: dict[tuple[str, str], list[RequestRecord]] = {}
    for row in data["requests"]:
        groups.setdefault((row["target"], row["pool"] or "-"), []).append(RequestRecord(**row))
    labels = [f"{t}\n{p}" for t, p in groups]
    figures = [summarize(rs, 1.0, Slo()) for rs in groups.values()]
    values = (
        [f["requests"] for f in figures],
        [(f["ttft"]["p50"] or 0) * 1000 for f in figures],
        [(f["e2e"]["p50"] or 0) * 1000 for f in figures],
    )
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    targets = sorted({t for t, _ in groups}, key=[t["name"] for t in data["targets"]].index)
    bar_colors = [colors[targets.index(t) % len(colors)] for t, _ in groups]
    for ax, ys, name in zip(
        axes, values, ("requests", "TTFT p50 (ms)", "e2e p50 (ms)"), strict=True
    ):
        ax.bar(range(len(ys)), ys, color=bar_colors)
        ax.set_xticks(range(len(ys)), labels, fontsize="small")
        ax.set_ylabel(name)
        ax.grid(alpha=0.3, axis="y")
    fig.suptitle("Per pool (x-gateway-pool), all loads together")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def write_plots(folder: Path, data: dict[str, Any]) -> list[Path]:
    paths = [folder / name for name in PLOTS]
    for draw, path in zip(
        (latency_cdf, latency_vs_load, throughput_vs_load, per_pool), paths, strict=True
    ):
        draw(data, path)
    return paths
