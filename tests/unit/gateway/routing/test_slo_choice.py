"""The SLO decision: the pool predicted to meet the objective with the most headroom; the
fixed threshold while any model is unsure; best effort or shed when none meets it."""

from __future__ import annotations

from gateway.routing.latency import Prediction
from gateway.routing.slo_choice import Candidate, Choice, choose

PD_SLOW_LINK = Candidate("pd", Prediction(ttft_ms=2100.0, tpot_ms=20.0, source="pool"))
COLOCATED = Candidate("colocated", Prediction(ttft_ms=240.0, tpot_ms=45.0, source="pool"))
PD_FAST_LINK = Candidate("pd", Prediction(ttft_ms=180.0, tpot_ms=15.0, source="replica"))


def test_long_prompt_goes_where_it_is_predicted_to_meet_the_slo_not_to_pd() -> None:
    # Today's H200: PD's link makes a 2,048-token prompt miss a 1 s TTFT; colocated meets it.
    assert choose([PD_SLOW_LINK, COLOCATED], 1000, 50, sheddable=False) == Choice(
        "colocated", "meets_slo", 240.0
    )


def test_most_headroom_counts_tpot_too() -> None:
    # Both meet TTFT 1 s; colocated uses 90% of the 50 ms TPOT, PD 30%: PD has the headroom.
    assert choose([COLOCATED, PD_FAST_LINK], 1000, 50, sheddable=False).name == "pd"


def test_an_unsure_model_leaves_the_fixed_threshold_to_decide() -> None:
    assert choose([PD_FAST_LINK, Candidate("colocated", None)], 1000, 50, False) is None
    assert choose([], 1000, None, False) is None


def test_none_meets_it_interactive_gets_the_best_sheddable_is_refused() -> None:
    assert choose([PD_SLOW_LINK, COLOCATED], 100, None, sheddable=False) == Choice(
        "colocated", "best_effort", 240.0
    )
    assert choose([PD_SLOW_LINK, COLOCATED], 100, None, sheddable=True) == Choice(
        None, "shed", 240.0
    )


def test_no_objective_the_fastest_wins() -> None:
    assert choose([PD_SLOW_LINK, COLOCATED], None, None, False) == Choice(
        "colocated", "fastest", 240.0
    )
