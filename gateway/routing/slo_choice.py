"""The P/D decision from predicted latency (issue 38): a scorer over the eligible pools.

Each candidate carries its prediction (``latency.LatencyBook.predict``) or None. With an
objective (``flow.slo.Slo``: TTFT and/or TPOT in ms, passed here as two numbers):

- any candidate without a confident prediction: None, and the fixed threshold decides, as
  before (reason ``fixed_threshold``, counted by the caller);
- else the candidate predicted to meet the objective with the most headroom (the smallest
  ratio of prediction to objective, over TTFT and TPOT): reason ``meets_slo``;
- none predicted to meet it: the best prediction (``best_effort``) for an interactive band,
  and refusal (``shed``: a 429 with retry-after, before any engine time) for a sheddable one.

Without an objective, the lowest predicted TTFT wins (``fastest``)::

    choose([Candidate("pd", p1), Candidate("colocated", p2)], 1000, 50, sheddable=False)
    # Choice(name="colocated", reason="meets_slo", ttft_ms=180.0)
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from gateway.routing.latency import Prediction
from gateway.values import value

FIXED_THRESHOLD = "fixed_threshold"
MEETS_SLO = "meets_slo"
BEST_EFFORT = "best_effort"
SHED = "shed"
FASTEST = "fastest"
REASONS = (FIXED_THRESHOLD, MEETS_SLO, BEST_EFFORT, SHED, FASTEST)


@value
class Candidate:
    name: str
    prediction: Prediction | None


@value
class Choice:
    name: str | None
    """None with ``shed``: refuse the request."""
    reason: str
    ttft_ms: float | None


def choose(
    candidates: Sequence[Candidate],
    ttft_ms: int | None,
    tpot_ms: int | None,
    sheddable: bool,
) -> Choice | None:
    """See the module's docstring; None: the fixed threshold decides."""
    if not candidates or any(c.prediction is None for c in candidates):
        return None
    if ttft_ms is None and tpot_ms is None:
        best = min(candidates, key=_ttft)
        return Choice(best.name, FASTEST, _ttft(best))
    best, ratio = candidates[0], math.inf
    for c in candidates:  # strictly less: the first of equals wins (the caller's order)
        r = _ratio(c.prediction, ttft_ms, tpot_ms)
        if r < ratio:
            best, ratio = c, r
    if ratio <= 1.0:
        return Choice(best.name, MEETS_SLO, _ttft(best))
    if sheddable:
        return Choice(None, SHED, _ttft(best))
    return Choice(best.name, BEST_EFFORT, _ttft(best))


def _ttft(candidate: Candidate) -> float:
    assert candidate.prediction is not None
    return candidate.prediction.ttft_ms


def _ratio(p: Prediction | None, ttft_ms: int | None, tpot_ms: int | None) -> float:
    """How much of the objective the prediction uses: the worse of TTFT's and TPOT's share;
    a TPOT objective with no TPOT prediction yet uses none of it (TTFT decides)."""
    assert p is not None
    worst = 0.0
    if ttft_ms is not None:
        worst = p.ttft_ms / ttft_ms
    if tpot_ms is not None and p.tpot_ms is not None:
        worst = max(worst, p.tpot_ms / tpot_ms)
    return worst
