"""Percentiles, summaries, goodput under an SLO, per-group breakdown and the knee."""

from __future__ import annotations

import pytest

from loadtests.pdload.records import RequestRecord
from loadtests.pdload.stats import Slo, find_knee, percentile, summarize, summarize_by


def _rec(
    ttft: float | None = 0.1,
    tpot: float | None = 0.01,
    error: str | None = None,
    pool: str | None = "pd",
    tokens: int = 10,
) -> RequestRecord:
    return RequestRecord(
        target="t", step=0, index=0, shape="fixed", sent_at=0.0, lag=0.0,
        expected_prompt_tokens=5, max_tokens=tokens, error=error, ttft=ttft, tpot=tpot,
        e2e=(ttft or 0) + (tpot or 0) * (tokens - 1), itls=[tpot or 0] * (tokens - 1),
        completion_tokens=None if error else tokens, pool=pool,
    )  # fmt: skip


def test_percentile_interpolates_like_numpy() -> None:
    values = [1.0, 2.0, 3.0, 4.0]
    assert percentile(values, 50) == 2.5
    assert percentile(values, 0) == 1.0
    assert percentile(values, 100) == 4.0
    assert percentile(values, 90) == pytest.approx(3.7)
    assert percentile([], 50) is None
    assert percentile(list(range(101)), 99) == 99


def test_goodput_counts_only_successes_within_every_limit() -> None:
    records = [_rec(ttft=0.1), _rec(ttft=0.3), _rec(ttft=0.1, tpot=0.2), _rec(error="http_500")]
    s = summarize(records, duration=2.0, slo=Slo(ttft=0.2, tpot=0.05))
    assert s["requests"] == 4 and s["ok"] == 3
    assert s["errors"] == {"http_500": 1}
    assert s["throughput_rps"] == 1.5
    assert s["goodput_rps"] == 0.5
    assert s["slo_attainment"] == 0.25
    assert s["output_tokens_per_s"] == 15.0
    assert s["goodput_tokens_per_s"] == 5.0
    assert s["ttft"]["p50"] == pytest.approx(0.1)


def test_no_slo_makes_goodput_the_throughput() -> None:
    records = [_rec(), _rec(error="timeout")]
    s = summarize(records, 1.0, Slo())
    assert s["goodput_rps"] == s["throughput_rps"] == 1.0


def test_a_request_without_a_token_fails_a_ttft_limit() -> None:
    assert not Slo(ttft=1.0).met_by(_rec(ttft=None, tpot=None))


def test_summaries_per_pool_share_the_span() -> None:
    records = [_rec(pool="pd"), _rec(pool="pd"), _rec(pool="colocated"), _rec(pool=None)]
    groups = summarize_by(records, lambda r: r.pool, 2.0, Slo())
    assert list(groups) == ["-", "colocated", "pd"]
    assert groups["pd"]["throughput_rps"] == 1.0


@pytest.mark.parametrize(
    ("points", "knee"),
    [
        ([(1, 1.0), (2, 2.0), (4, 3.9), (8, 4.0), (16, 2.0)], 4),
        ([(1, 1.0), (2, 2.0), (4, 4.0)], 4),
        ([(4, 3.0), (1, 1.0), (2, 2.9)], 2),
        ([(1, 0.0), (2, 0.0)], None),
        ([], None),
    ],
)
def test_knee_is_the_cheapest_load_with_almost_all_the_goodput(
    points: list[tuple[float, float]], knee: float | None
) -> None:
    assert find_knee(points, tolerance=0.05) == knee


def test_the_gateways_ttft_prediction_is_scored_against_the_measured_ttft() -> None:
    from dataclasses import replace

    records = [
        replace(_rec(ttft=0.1), predicted_ttft_ms="110"),  # 10% off
        replace(_rec(ttft=0.2), predicted_ttft_ms="100"),  # 50% off
        replace(_rec(ttft=0.1), predicted_ttft_ms="junk"),  # a bad header: not scored
        _rec(ttft=0.1),  # no prediction (not confident yet)
    ]
    found = summarize(records, duration=1.0, slo=Slo())["ttft_prediction"]
    assert found["n"] == 2
    assert found["mape"] == pytest.approx(0.3)
    assert summarize([_rec()], duration=1.0, slo=Slo())["ttft_prediction"] is None
