"""The wired decision's parts: each pool's load features at the choice, the choice by mode
(shadow reports, decide chooses, shed refuses), and learning from the outcome with the
features frozen at the choice."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from gateway.errors import Shed
from gateway.routing.config import Role
from gateway.routing.latency import LatencyBook
from gateway.routing.predicted import (
    NO_OBJECTIVE,
    Objective,
    PredictionErrors,
    features,
    learn,
    predict_route,
)
from gateway.wire.outcome import RouteFacts


@dataclass
class FakePool:
    name: str
    in_flight: int = 0
    prompt_tokens: int = 0
    starting: int = 0


def confident(book: LatencyBook, pool: str, base: float, per_token: float) -> None:
    """TTFT = base + per_token x prefill tokens, TPOT 10 ms."""
    for i in range(book.settings.min_samples + 4):
        tokens = 50.0 * (i + 1)
        book.observe(pool, "r", (tokens, 0.0, 0.0, 0.0), base + per_token * tokens, 1, 10.0)


def test_features_read_the_load_books_figures() -> None:
    # The book's snapshot counts every gateway replica's load (3 here and 4 there, say).
    pool = FakePool("pd", in_flight=7, prompt_tokens=1000, starting=2)
    assert features(pool, 600, pd=True) == ((600.0, 1000.0, 2.0, 600.0), 7)
    assert features(pool, 600, pd=False) == ((600.0, 1000.0, 2.0, 0.0), 7)
    assert features(FakePool("c"), -5, pd=False) == ((0.0, 0.0, 0.0, 0.0), 0)


def test_unsure_models_leave_the_threshold_to_decide() -> None:
    book = LatencyBook()
    confident(book, "pd", 50.0, 1.0)
    pools = {Role.PD: FakePool("pd"), Role.COLOCATED: FakePool("colocated")}
    route = predict_route(book, pools, {"pd": 600, "colocated": 600}, NO_OBJECTIVE, "decide")
    assert route.role is None and route.reason is None
    assert route.ttft_ms("pd") == pytest.approx(650.0, rel=0.01)
    assert route.ttft_ms("colocated") is None


def test_decide_takes_the_pool_predicted_faster_where_it_is_faster() -> None:
    book = LatencyBook()
    confident(book, "pd", 200.0, 0.1)  # a fixed cost (the link's handshake), a cheap prefill
    confident(book, "colocated", 20.0, 1.0)  # cheap to start, its prefill stalls
    pools = {Role.PD: FakePool("pd"), Role.COLOCATED: FakePool("colocated")}
    objective = Objective(ttft_ms=1000)
    short = predict_route(book, pools, {"pd": 64, "colocated": 64}, objective, "decide")
    long = predict_route(book, pools, {"pd": 2000, "colocated": 2000}, objective, "decide")
    assert (short.role, short.reason) == (Role.COLOCATED, "meets_slo")
    assert (long.role, long.reason) == (Role.PD, "meets_slo")
    assert predict_route(book, pools, {"pd": 64}, objective, "shadow").role is None


def test_sheddable_request_no_pool_meets_is_refused_with_retry_after() -> None:
    book = LatencyBook()
    confident(book, "pd", 900.0, 0.0)
    confident(book, "colocated", 700.0, 0.0)
    pools = {Role.PD: FakePool("pd"), Role.COLOCATED: FakePool("colocated")}
    with pytest.raises(Shed) as shed:
        predict_route(book, pools, {}, Objective(ttft_ms=300, sheddable=True), "decide")
    assert shed.value.status == 429
    assert shed.value.headers["retry-after"] == "1"
    assert shed.value.headers["x-gateway-predicted-ttft-ms"] == "700"
    best = predict_route(book, pools, {}, Objective(ttft_ms=300), "decide")
    assert (best.role, best.reason) == (Role.COLOCATED, "best_effort")


def test_learn_uses_the_frozen_features_of_the_pool_that_served() -> None:
    from tests.unit.gateway.routing.outcome_values import served_outcome

    book = LatencyBook()
    busy = FakePool("colocated", in_flight=2, prompt_tokens=300, starting=1)
    pools = {Role.PD: FakePool("pd"), Role.COLOCATED: busy}
    route = predict_route(book, pools, {"pd": 100, "colocated": 100}, NO_OBJECTIVE, "shadow")
    learn(book, route, served_outcome(RouteFacts("stable", "colocated", "r", "x"), 0.25), 10.0)
    model = book._pools["colocated"][0]
    assert model._xs == [(100.0, 300.0, 1.0, 0.0)] and model._ys == [250.0]
    learn(book, route, served_outcome(RouteFacts("stable", "elsewhere", "r", "x"), 0.25), 20.0)
    assert "elsewhere" not in book._pools  # outside the decision: nothing learned


def test_the_error_collector_reads_the_book_at_scrape() -> None:
    collector = PredictionErrors()
    assert [m.samples for m in collector.collect()] == [[], []]
    book = LatencyBook()
    confident(book, "pd", 100.0, 0.0)
    book.observe("pd", "r", (10.0, 0.0, 0.0, 0.0), 125.0, 1, 12.5)
    collector.book = book
    family, mean = collector.collect()
    found = {(s.labels["quantity"], s.labels["quantile"]): s.value for s in family.samples}
    assert found[("ttft", "0.9")] == pytest.approx(0.2, abs=0.01)
    assert found[("tpot", "0.9")] == pytest.approx(0.2, abs=0.01)
    assert found[("tpot", "0.5")] == pytest.approx(0.0, abs=0.01)  # the earlier four exact
    means = {s.labels["quantity"]: s.value for s in mean.samples}
    assert means["ttft"] == pytest.approx(0.2 / 5, abs=0.01)  # one 20% miss in five scored
