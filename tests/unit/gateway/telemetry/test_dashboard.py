"""The Grafana dashboard asks only for metrics the gateway exposes, by labels they carry."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import Counter, Gauge, Histogram

from gateway.metrics import GatewayMetrics, PlainCounter, PlainHistogram

DASHBOARD = Path(__file__).parents[4] / "k8s" / "dashboards" / "pd-gateway.json"
METRIC = re.compile(r"\b((?:gateway|gen_ai)_[a-z0-9_]+)\b")
# vLLM's own engine metrics, as Ray exports them (``vllm:x`` -> ``ray_vllm_x``): not the gateway's.
ENGINE_METRIC = re.compile(r"\bray_vllm_[a-z0-9_]+\b")
GROUPING = re.compile(r"\bby \(([^)]*)\)")
MATCHER = re.compile(r"([a-z_]+)\s*(?:=~|!~|!=|=)\s*\"")


def exposed() -> dict[str, set[str]]:
    """Every sample name GatewayMetrics can expose, with the labels it carries."""
    names: dict[str, set[str]] = {}
    for metric in vars(GatewayMetrics()).values():
        if isinstance(metric, PlainCounter):  # the per-request ones, exposed by a collector
            names[metric.name + "_total"] = set(metric.labelnames)
        elif isinstance(metric, PlainHistogram):
            labels = set(metric.labelnames)
            names.update({metric.name + "_sum": labels, metric.name + "_count": labels})
            names[metric.name + "_bucket"] = labels | {"le"}
        if not isinstance(metric, Counter | Gauge | Histogram):
            continue
        labels = set(metric._labelnames)
        base = metric._name
        if isinstance(metric, Counter):
            names[base + "_total"] = labels
        elif isinstance(metric, Histogram):
            names.update({base + "_sum": labels, base + "_count": labels})
            names[base + "_bucket"] = labels | {"le"}
        else:
            names[base] = labels
    return names


def panels() -> list[dict[str, Any]]:
    document = json.loads(DASHBOARD.read_text())
    return [p for p in document["panels"] if p["type"] != "row"]


def expressions() -> list[str]:
    return [t["expr"] for p in panels() for t in p["targets"]]


@pytest.mark.parametrize("expr", [e for e in expressions() if not ENGINE_METRIC.search(e)])
def test_every_query_names_exposed_metrics_and_their_labels(expr: str) -> None:
    known = exposed()
    metrics = METRIC.findall(expr)
    assert metrics, expr
    for name in metrics:
        assert name in known, f"{name} is not exposed by the gateway"
    allowed = set().union(*(known[name] for name in metrics))
    used = {label.strip() for group in GROUPING.findall(expr) for label in group.split(",")}
    used |= set(MATCHER.findall(expr))
    assert used <= allowed, f"labels {used - allowed} not on {metrics}"


def test_layout_and_variables_are_consistent() -> None:
    document = json.loads(DASHBOARD.read_text())
    ids = [p["id"] for p in document["panels"]]
    assert len(ids) == len(set(ids))
    for panel in document["panels"]:
        grid = panel["gridPos"]
        assert grid["x"] + grid["w"] <= 24, panel["title"]
    variables = {v["name"] for v in document["templating"]["list"]}
    text = DASHBOARD.read_text()
    assert set(re.findall(r"\$(?!__)([a-z]+)", text)) <= variables
    titles = " ".join(p["title"] for p in panels())
    subjects = ("Time to first token", "prompt length", "Decode speed", "tenant", "Errors", "KV")
    for subject in subjects:
        assert subject in titles
