"""Percentiles, throughput and goodput of a set of requests, and the knee of a rate sweep.

Pure functions over :class:`~loadtests.pdload.records.RequestRecord` lists::

    slo = Slo(ttft=0.5, tpot=0.05)
    summary = summarize(records, duration=30.0, slo=slo)
    summary["goodput_rps"], summary["ttft"]["p99"]
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from loadtests.pdload.records import RequestRecord

PERCENTILES = (50, 90, 99)


@dataclass(frozen=True, slots=True)
class Slo:
    """Per-request limits in seconds; ``None`` means no limit. A good request meets them all."""

    ttft: float | None = None
    tpot: float | None = None
    e2e: float | None = None

    def met_by(self, r: RequestRecord) -> bool:
        if not r.ok:
            return False
        checks = ((self.ttft, r.ttft), (self.tpot, r.tpot), (self.e2e, r.e2e))
        # A request with no value for a limited figure (no token at all) cannot be shown to meet it.
        return all(limit is None or (v is not None and v <= limit) for limit, v in checks)

    def describe(self) -> str:
        parts = [
            f"{name} <= {value * 1000:g} ms"
            for name, value in (("TTFT", self.ttft), ("TPOT", self.tpot), ("e2e", self.e2e))
            if value is not None
        ]
        return ", ".join(parts) or "none (every successful request counts)"


def percentile(values: Sequence[float], p: float) -> float | None:
    """The p-th percentile by linear interpolation between closest ranks (numpy's default)."""
    if not values:
        return None
    ordered = sorted(values)
    rank = (len(ordered) - 1) * p / 100
    low, high = math.floor(rank), math.ceil(rank)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


def distribution(values: Sequence[float]) -> dict[str, float | None]:
    """Mean and the report's percentiles of ``values``."""
    out: dict[str, float | None] = {f"p{p}": percentile(values, p) for p in PERCENTILES}
    out["mean"] = sum(values) / len(values) if values else None
    return out


def _present(values: Iterable[float | None]) -> list[float]:
    return [v for v in values if v is not None]


def prefix_figures(ok: Sequence[RequestRecord]) -> dict[str, Any]:
    """Prompt tokens, the engine's cached share of them and what was left to prefill.

    The hit rate counts only requests whose server reported ``cached_tokens``; ``None`` when
    none did (a server that does not say cannot be shown to hit).
    """
    prompt = sum(r.prompt_tokens or 0 for r in ok)
    reported = [r for r in ok if r.cached_tokens is not None]
    cached = sum(r.cached_tokens or 0 for r in reported)
    reported_prompt = sum(r.prompt_tokens or 0 for r in reported)
    return {
        "prompt_tokens_total": prompt,
        "cached_tokens_total": cached,
        "prefill_tokens_total": prompt - cached,
        "prefix_hit_rate": cached / reported_prompt if reported_prompt else None,
    }


def summarize(records: Sequence[RequestRecord], duration: float, slo: Slo) -> dict[str, Any]:
    """Counts, latency distributions, throughput and goodput of ``records`` over ``duration`` s."""
    ok = [r for r in records if r.ok]
    good = [r for r in records if slo.met_by(r)]
    out_tokens = sum(r.completion_tokens or 0 for r in ok)
    good_tokens = sum(r.completion_tokens or 0 for r in good)
    span = max(duration, 1e-9)
    return {
        "requests": len(records),
        "ok": len(ok),
        "errors": dict(Counter(r.error for r in records if r.error is not None)),
        "duration_s": duration,
        "throughput_rps": len(ok) / span,
        "output_tokens_per_s": out_tokens / span,
        "goodput_rps": len(good) / span,
        "goodput_tokens_per_s": good_tokens / span,
        "slo_attainment": len(good) / len(records) if records else None,
        "ttft": distribution(_present(r.ttft for r in ok)),
        "itl": distribution([x for r in ok for x in r.itls]),
        "tpot": distribution(_present(r.tpot for r in ok)),
        "e2e": distribution(_present(r.e2e for r in ok)),
        "prompt_tokens": distribution(_present(float(r.prompt_tokens or 0) for r in ok)),
        "completion_tokens": distribution(_present(float(r.completion_tokens or 0) for r in ok)),
        "lag": distribution([r.lag for r in records]),
        **prefix_figures(ok),
        "ttft_prediction": prediction_error(ok),
    }


def prediction_error(ok: Sequence[RequestRecord]) -> dict[str, Any] | None:
    """How far the gateway's predicted TTFT (``x-gateway-predicted-ttft-ms``) was from the TTFT
    measured here: the mean absolute percentage error (MAPE) and its p50/p90, over the requests
    that carried a prediction; None when none did."""
    errors = []
    for r in ok:
        predicted = r.predicted_ttft_ms
        if predicted is None or not predicted.isdigit() or not r.ttft:
            continue
        errors.append(abs(int(predicted) / 1000 - r.ttft) / r.ttft)
    if not errors:
        return None
    errors.sort()
    return {
        "n": len(errors),
        "mape": sum(errors) / len(errors),
        "p50": errors[len(errors) // 2],
        "p90": errors[min(len(errors) - 1, int(0.9 * len(errors)))],
    }


def summarize_by(
    records: Sequence[RequestRecord],
    key: Callable[[RequestRecord], str | None],
    duration: float,
    slo: Slo,
) -> dict[str, dict[str, Any]]:
    """One summary per value of ``key`` (``"-"`` when a request has none), over the same span."""
    groups: dict[str, list[RequestRecord]] = {}
    for r in records:
        groups.setdefault(key(r) or "-", []).append(r)
    return {name: summarize(rs, duration, slo) for name, rs in sorted(groups.items())}


def find_knee(points: Sequence[tuple[float, float]], tolerance: float = 0.05) -> float | None:
    """The lowest offered load whose goodput reaches ``1 - tolerance`` of the sweep's best.

    ``points`` are (offered load, goodput). Past the knee more load buys no more goodput, so the
    knee is the cheapest load that already gets (almost) all of it. ``None`` for no points or a
    sweep with no goodput at all.
    """
    if not points:
        return None
    best = max(g for _, g in points)
    if best <= 0:
        return None
    return min(load for load, g in points if g >= (1 - tolerance) * best)
