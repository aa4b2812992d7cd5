"""The online latency models: they learn a pool's cost, resist outliers, stay bounded, and say
nothing until they have enough samples (the fixed threshold decides then)."""

from __future__ import annotations

import random

import pytest

from gateway.routing.latency import LatencyBook, LatencyModel, ModelSettings


def _ttft(prefill: float, in_flight: float, waiting: float, kv: float) -> float:
    # A pool's truth: 20 ms base, 0.05 ms per own token, 0.02 per token ahead, 5 ms a waiter,
    # 1 ms per KV token to move (today's H200 link).
    return 20 + 0.05 * prefill + 0.02 * in_flight + 5 * waiting + 1.0 * kv


def test_silent_until_min_samples_then_confident() -> None:
    m = LatencyModel(4, ModelSettings(min_samples=8))
    rng = random.Random(1)
    for i in range(7):
        x = (rng.randint(1, 2000), rng.randint(0, 4000), rng.randint(0, 4), 0)
        m.observe(x, _ttft(*x))
        assert m.predict(x) is None and not m.confident, i
    x = (100, 0, 0, 0)
    m.observe(x, _ttft(*x))
    assert m.confident and m.predict(x) is not None


def test_learns_the_pools_costs_including_the_kv_link() -> None:
    m = LatencyModel(4)
    rng = random.Random(2)
    for _ in range(200):  # the mixed workload: half short prompts, half long, over a PD pool
        prefill = rng.randint(16, 64) if rng.random() < 0.5 else rng.randint(500, 2048)
        x = (prefill, rng.randint(0, 4000), rng.randint(0, 4), prefill)
        m.observe(x, _ttft(*x) * rng.uniform(0.97, 1.03))
    for x in ((2048, 0, 0, 2048), (16, 0, 0, 16), (600, 3000, 3, 600)):
        predicted = m.predict(x)
        assert predicted is not None
        assert predicted == pytest.approx(_ttft(*x), rel=0.08)
    errors = m.error_quantiles()
    assert errors is not None and errors[0] < 0.05


def test_outliers_do_not_drag_the_fit() -> None:
    m = LatencyModel(1, ModelSettings(window=64))
    rng = random.Random(3)
    for i in range(64):
        running = rng.randint(1, 32)
        truth = 10 + 0.5 * running
        # One in ten stalls 50x, one in ten answers from nowhere (a cached error, 1/50th):
        # a relative fit alone would follow the fast ones, a plain one the slow ones.
        outlier = truth * 50 if i % 10 == 0 else truth / 50 if i % 10 == 5 else truth
        m.observe((running,), outlier)
    predicted = m.predict((16,))
    assert predicted == pytest.approx(18.0, rel=0.1)


def test_the_window_is_fixed_memory_and_follows_a_change() -> None:
    m = LatencyModel(1, ModelSettings(window=32, min_samples=8, refit_every=1))
    for i in range(500):
        m.observe((i % 8,), 10.0 + (i % 8))
    for i in range(32):  # the hardware changed: every request costs twice as much
        m.observe((i % 8,), 2 * (10.0 + (i % 8)))
    assert m.samples == 32
    assert m.predict((4,)) == pytest.approx(28.0, rel=0.05)


def test_bad_values_are_dropped_not_learned() -> None:
    m = LatencyModel(1, ModelSettings(min_samples=2))
    for bad in (float("nan"), float("inf"), -1.0):
        m.observe((1,), bad)
        m.observe((bad,), 1.0)
    m.observe((1, 2), 1.0)  # the wrong number of features
    assert m.samples == 0


def test_book_answers_from_the_replica_once_confident_else_the_pool() -> None:
    book = LatencyBook(ModelSettings(min_samples=4, window=16), per_replica=True)
    assert book.predict("pd", "r0", (10, 0, 0, 10), 1) is None
    for i in range(8):
        book.observe("pd", "r0", (100 + i, 0, 0, 100 + i), 200.0 + i, 4, 20.0)
    for i in range(4):
        book.observe("pd", "r1", (100 + i, 0, 0, 100 + i), 100.0 + i, 4, 20.0)
    r0 = book.predict("pd", "r0", (104, 0, 0, 104), 4)
    new = book.predict("pd", "r9", (104, 0, 0, 104), 4)
    assert r0 is not None and r0.source == "replica" and r0.ttft_ms == pytest.approx(204, rel=0.05)
    assert new is not None and new.source == "pool"
    assert r0.tpot_ms == pytest.approx(20.0)
    assert "pd" in book.errors()


def test_book_bounds_its_keys() -> None:
    book = LatencyBook(max_keys=3, per_replica=True)
    for i in range(50):
        book.observe("p", f"r{i}", (1, 0, 0, 0), 10.0, 1, 1.0)
    assert len(book._pools) + len(book._replicas) == 3


def test_refits_are_spaced_by_the_clock_as_well_as_the_count() -> None:
    """At thousands of requests a second a refit every 32 samples would be a fit every few
    milliseconds: with ``now`` given, at most one each ``refit_seconds``."""
    settings = ModelSettings(window=64, min_samples=4, refit_every=4, refit_seconds=1.0)
    m = LatencyModel(1, settings)
    for i in range(4):
        m.observe((float(i),), 10.0, now=0.0)
    first = m.weights
    assert first is not None  # the first fit comes at min_samples, whatever the clock
    for i in range(20):  # five refits' worth of samples within the same second
        m.observe((float(i),), 100.0, now=0.5)
    assert m.weights == first
    m.observe((1.0,), 100.0, now=1.0)  # a second later: refitted
    assert m.weights != first


def test_book_learns_replica_models_only_when_asked() -> None:
    """The decision predicts per pool: by default an exchange teaches its pool's models alone
    (a replica's pair would double every observation's cost for no reader)."""
    book = LatencyBook(ModelSettings(min_samples=2, window=8))
    for i in range(4):
        book.observe("pd", "r0", (100 + i, 0, 0, 100 + i), 200.0 + i, 4, 20.0)
    assert list(book._pools) == ["pd"] and not book._replicas
    prediction = book.predict("pd", "r0", (104, 0, 0, 104), 4)
    assert prediction is not None and prediction.source == "pool"


def test_book_learns_at_most_learn_per_second_outcomes_a_pool() -> None:
    """Past the rate a window's refit reads, an outcome would be overwritten unread: the book
    keeps outcomes spaced by 1/learn_per_second on the clock given, per pool."""
    book = LatencyBook(ModelSettings(min_samples=2, window=64, learn_per_second=10.0))
    for i in range(100):  # 100 outcomes in one second: ten kept, one every 0.1 s
        book.observe("pd", "r0", (1.0, 0, 0, 0), 10.0 + i % 3, 1, 5.0, now=i * 0.01)
        book.observe("colo", "r0", (1.0, 0, 0, 0), 10.0, 1, 5.0, now=0.0)
    assert book._pools["pd"][0].samples == 10 and book._pools["pd"][1].samples == 10
    assert book._pools["colo"][0].samples == 1  # all at one instant
    every = LatencyBook(ModelSettings(min_samples=2, window=64, learn_per_second=0))
    for _ in range(20):
        every.observe("pd", "r0", (1.0, 0, 0, 0), 10.0, 1, 5.0, now=0.0)
    assert every._pools["pd"][0].samples == 20
