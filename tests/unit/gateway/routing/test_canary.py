"""Sticky weighted variant choice and the sliding-window rollback judgement."""

from __future__ import annotations

from collections import Counter

import pytest

from gateway.routing.canary import (
    SlidingWindow,
    WindowSummary,
    choose_variant,
    rollback_reason,
    summarise,
    verdict,
)
from gateway.routing.config import CanaryConfig

KEYS = [f"key-{i}".encode() for i in range(20000)]


def split(weights: list[tuple[str, float]]) -> Counter[str | None]:
    return Counter(choose_variant(k, weights) for k in KEYS)


def test_shares_follow_the_weights() -> None:
    counts = split([("stable", 95), ("canary", 5)])
    # binomial(20000, 0.05): sd about 31; 5 sd either way
    assert abs(counts["canary"] - 1000) < 155
    counts = split([("a", 1), ("b", 1), ("c", 2)])
    assert abs(counts["c"] - 10000) < 400 and abs(counts["a"] - 5000) < 400


def test_same_key_same_variant() -> None:
    weights = [("stable", 50.0), ("canary", 50.0)]
    assert all(choose_variant(k, weights) == choose_variant(k, weights) for k in KEYS[:500])


def test_raising_the_canary_only_moves_keys_to_it() -> None:
    before = {k: choose_variant(k, [("stable", 95), ("canary", 5)]) for k in KEYS}
    after = {k: choose_variant(k, [("stable", 90), ("canary", 10)]) for k in KEYS}
    moved = [k for k in KEYS if before[k] != after[k]]
    assert moved and all(before[k] == "stable" and after[k] == "canary" for k in moved)


def test_zero_weights_choose_nothing() -> None:
    assert choose_variant(b"k", [("stable", 0), ("canary", 0)]) is None
    assert choose_variant(b"k", [("stable", 0), ("canary", 1)]) == "canary"


def test_window_forgets_old_events_and_computes_p95() -> None:
    window = SlidingWindow(10)
    for i in range(100):
        window.add(float(i) / 10, error=i % 10 == 0, ttft=float(i))
    summary = window.summary(9.9)
    assert summary.requests == 100 and summary.error_rate == pytest.approx(0.1)
    assert summary.ttft_p95 == 94.0
    assert window.summary(25.0) == WindowSummary(0, 0.0, None)


BASE = WindowSummary(requests=100, error_rate=0.01, ttft_p95=0.2)
RULES = {"min_requests": 20, "error_rate_margin": 0.05, "ttft_p95_margin": 0.5}


def test_rollback_on_error_rate() -> None:
    assert rollback_reason(WindowSummary(30, 0.05, 0.2), BASE, **RULES) is None
    reason = rollback_reason(WindowSummary(30, 0.2, 0.2), BASE, **RULES)
    assert reason is not None and "error rate" in reason


def test_rollback_on_slow_first_token() -> None:
    assert rollback_reason(WindowSummary(30, 0.0, 0.29), BASE, **RULES) is None
    reason = rollback_reason(WindowSummary(30, 0.0, 0.31), BASE, **RULES)
    assert reason is not None and "TTFT" in reason


def test_no_verdict_on_too_few_requests() -> None:
    assert rollback_reason(WindowSummary(19, 1.0, None), BASE, **RULES) is None


def test_failing_canary_judged_even_without_baseline_traffic() -> None:
    quiet = WindowSummary(0, 0.0, None)
    assert rollback_reason(WindowSummary(25, 1.0, None), quiet, **RULES) is not None
    assert rollback_reason(WindowSummary(25, 0.0, 9.0), quiet, **RULES) is None


def test_millisecond_noise_is_not_a_slow_canary() -> None:
    fast = WindowSummary(100, 0.0, 0.001)
    noisy = WindowSummary(30, 0.0, 0.004)  # 4x slower, but by 3 ms
    assert rollback_reason(noisy, fast, **RULES) is not None
    assert rollback_reason(noisy, fast, **RULES, ttft_p95_min_delta=0.05) is None


def test_ceilings_roll_back_even_when_the_baseline_is_as_bad() -> None:
    bad = WindowSummary(100, 0.3, 12.0)
    assert rollback_reason(bad, bad, **RULES) is None  # relatively, no worse
    by_errors = rollback_reason(bad, bad, **RULES, error_rate_ceiling=0.2)
    assert by_errors is not None and "ceiling 0.2" in by_errors
    by_ttft = rollback_reason(bad, bad, **RULES, ttft_p95_ceiling=10.0)
    assert by_ttft is not None and "ceiling 10s" in by_ttft
    few = WindowSummary(19, 1.0, 60.0)  # too few requests: no verdict, ceilings included
    assert rollback_reason(few, bad, **RULES, error_rate_ceiling=0.2) is None


def test_verdict_reads_the_configured_ceilings_and_their_defaults() -> None:
    defaults = CanaryConfig()
    assert (defaults.error_rate_ceiling, defaults.ttft_p95_ceiling_seconds) == (0.2, 10.0)
    slow = WindowSummary(100, 0.0, 11.0)
    assert verdict(slow, slow, defaults) is not None
    assert verdict(slow, slow, CanaryConfig(ttft_p95_ceiling_seconds=None)) is None


def test_summarise_is_the_window_summary() -> None:
    assert summarise([]) == WindowSummary(0, 0.0, None)
    summary = summarise([(True, None), (False, 0.1), (False, 0.3)])
    assert summary == WindowSummary(3, pytest.approx(1 / 3), 0.3)  # type: ignore[arg-type]
