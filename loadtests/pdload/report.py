"""The report folder's data: ``report.json`` (every figure and every request) and ``report.md``.

data = build_report(meta, results, slo, knee_tolerance)
write_report(Path("out"), data, results)
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import orjson

from loadtests.pdload.runner import StepResult
from loadtests.pdload.stats import Slo, find_knee, summarize, summarize_by


def step_figures(result: StepResult, slo: Slo) -> dict[str, Any]:
    records, duration = result.records, result.duration
    return {
        "step": result.step.index,
        "mode": result.step.mode,
        "offered": result.step.load,
        "summary": summarize(records, duration, slo),
        "by_pool": summarize_by(records, lambda r: r.pool, duration, slo),
        "by_variant": summarize_by(records, lambda r: r.variant, duration, slo),
        "by_shape": summarize_by(records, lambda r: r.shape, duration, slo),
        "by_tenant": summarize_by(records, lambda r: r.tenant, duration, slo),
    }


def build_report(
    meta: dict[str, Any], results: Sequence[StepResult], slo: Slo, knee_tolerance: float
) -> dict[str, Any]:
    targets: dict[str, dict[str, Any]] = {}
    for result in results:
        entry = targets.setdefault(result.target, {"name": result.target, "steps": []})
        entry["steps"].append(step_figures(result, slo))
    for entry in targets.values():
        points = [(s["offered"], s["summary"]["goodput_rps"]) for s in entry["steps"]]
        entry["knee"] = find_knee(points, knee_tolerance) if len(points) > 1 else None
        entry["knee_at_top"] = entry["knee"] is not None and entry["knee"] == max(
            p for p, _ in points
        )
    return {
        "meta": {**meta, "slo": slo.describe(), "knee_tolerance": knee_tolerance},
        "targets": list(targets.values()),
        "requests": [r.to_json() for result in results for r in result.records],
    }


def _ms(value: float | None) -> str:
    return "" if value is None else f"{value * 1000:.1f}"


def _row(label: list[str], s: dict[str, Any]) -> str:
    errors = ", ".join(f"{k} {v}" for k, v in sorted(s["errors"].items())) or "0"
    cells = [
        *label,
        str(s["requests"]),
        errors,
        f"{s['throughput_rps']:.2f}",
        f"{s['output_tokens_per_s']:.1f}",
        f"{s['goodput_rps']:.2f}",
        _ms(s["ttft"]["p50"]),
        _ms(s["ttft"]["p90"]),
        _ms(s["ttft"]["p99"]),
        _ms(s["itl"]["p50"]),
        _ms(s["itl"]["p99"]),
        _ms(s["tpot"]["p50"]),
        _ms(s["e2e"]["p50"]),
        _ms(s["e2e"]["p99"]),
        "" if s["prefix_hit_rate"] is None else f"{s['prefix_hit_rate']:.1%}",
        str(s["prefill_tokens_total"]),
    ]
    return "| " + " | ".join(cells) + " |"


_FIGURES = (
    "requests | errors | req/s | out tok/s | goodput req/s | TTFT p50 ms | TTFT p90 ms | "
    "TTFT p99 ms | ITL p50 ms | ITL p99 ms | TPOT p50 ms | e2e p50 ms | e2e p99 ms | "
    "prefix hit | prefill tokens"
)


def _table(head: list[str], rows: list[str]) -> list[str]:
    columns = len(head) + _FIGURES.count("|") + 1
    return ["| " + " | ".join(head) + " | " + _FIGURES + " |", "|" + "---|" * columns, *rows, ""]


def render_markdown(data: dict[str, Any]) -> str:
    meta = data["meta"]
    lines = [
        f"# {meta.get('title') or 'pd-loadtest report'}",
        "",
        f"Command: `{meta['command']}`",
        "",
    ]
    lines += [f"Workload: {meta['workload']}. SLO: {meta['slo']}.", ""]
    load = "rate (req/s)" if meta["mode"] == "open" else "concurrency"
    lines += ["## All targets", ""]
    rows = [
        _row([t["name"], f"{s['offered']:g}"], s["summary"])
        for t in data["targets"]
        for s in t["steps"]
    ]
    lines += _table(["target", load], rows)
    for t in data["targets"]:
        if t["knee"] is not None:
            note = (
                " (goodput still growing at the highest load: sweep higher)"
                if t["knee_at_top"]
                else ""
            )
            lines += [f"Knee of `{t['name']}`: {t['knee']:g}{note}.", ""]
    for group, title in (
        ("by_pool", "pool"),
        ("by_variant", "variant"),
        ("by_shape", "prompt shape"),
        ("by_tenant", "tenant"),
    ):
        rows = [
            _row([t["name"], f"{s['offered']:g}", name], figures)
            for t in data["targets"]
            for s in t["steps"]
            for name, figures in s.get(group, {}).items()
            if group != "by_tenant" or name != "-"
        ]
        if rows or group != "by_tenant":
            lines += [f"## Per {title}", "", *_table(["target", load, title], rows)]
    return "\n".join(lines)


def write_report(folder: Path, data: dict[str, Any]) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "report.json").write_bytes(orjson.dumps(data, option=orjson.OPT_INDENT_2))
    (folder / "report.md").write_text(render_markdown(data))
