"""Latency models learned online from what each pool and replica delivered (issue 38).

A :class:`LatencyModel` is a linear model ``y = w . (1, x1, ..., xk)`` fitted on a bounded
window of recent samples (``window``, a ring: fixed memory) by Huber-weighted least squares
(iteratively reweighted, a few rounds), so one stalled request or a cold start does not drag
the fit. The fit is redone every ``refit_every`` samples and at most once every
``refit_seconds`` (a fit is a few milliseconds of Python: at thousands of requests a second,
once a second is what keeps it off the request's budget), never on the prediction path: a
prediction is a dot product (about a microsecond; ``loadtests/bench_latency_model.py``).

TTFT is fitted on (tokens to prefill, prompt tokens in flight, waiting requests, KV tokens to
move: PD only, zero for a colocated pool); TPOT on (running requests, prompt tokens in
flight). Until a model holds ``min_samples`` samples it is not confident and
:meth:`predict` gives None: the fixed threshold decides, as before. Each observation
first scores the current prediction against the outcome (the absolute percentage error,
kept in a bounded window for p50/p90), then learns from it::

    ttft = LatencyModel(features=4)
    ttft.observe((600, 1200, 2, 0), 180.0)        # milliseconds
    ttft.predict((600, 0, 0, 0))                   # None until min_samples, then ms
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TypeVar

from gateway.values import value

TTFT_FEATURES = ("prefill_tokens", "tokens_in_flight", "waiting", "kv_tokens")
TPOT_FEATURES = ("running", "tokens_in_flight")
"""A colocated engine's decode steps stall on the prefills beside them: the prompt tokens in
flight on the pool are TPOT's second input (0 where the caller does not know them)."""
HUBER_K = 1.345  # Huber's constant, in units of the residuals' robust scale (MAD)
TRIM = 3.0  # beyond this many Huber bounds a sample is a stall or a glitch: it weighs nothing
IRLS_ROUNDS = 5
K = TypeVar("K")


@dataclass(frozen=True, slots=True)
class ModelSettings:
    window: int = 128
    min_samples: int = 16
    refit_every: int = 32
    refit_seconds: float = 1.0
    error_window: int = 256
    learn_per_second: float = 128.0
    """At most this many outcomes a second teach a pool's models (0: every one). The window
    holds ``window`` samples and a refit reads it at most once each ``refit_seconds``: past
    that rate an observation would be overwritten before any fit saw it, and each costs the
    settling request microseconds (issue 38's overhead). Spaced on the outcomes' clock, so
    the samples kept are spread evenly over time whatever the traffic's rate."""

    def __post_init__(self) -> None:
        if not 2 <= self.min_samples <= self.window or self.refit_every < 1:
            raise ValueError("need 2 <= min_samples <= window and refit_every >= 1")
        if self.error_window < 1:
            raise ValueError("error_window must be positive")
        if self.learn_per_second < 0:
            raise ValueError("learn_per_second must not be negative")


class LatencyModel:
    """One quantity (TTFT or TPOT, ms) of one pool or replica; see the module's docstring."""

    __slots__ = (
        "_error_next",
        "_errors",
        "_fitted_at",
        "_next",
        "_since_fit",
        "_xs",
        "_ys",
        "features",
        "settings",
        "weights",
    )

    def __init__(self, features: int, settings: ModelSettings | None = None) -> None:
        if features < 1:
            raise ValueError("a model needs at least one feature")
        self.features = features
        self.settings = settings or ModelSettings()
        self._xs: list[tuple[float, ...]] = []
        self._ys: list[float] = []
        self._next = 0
        self._since_fit = 0
        self._fitted_at = -math.inf
        self._errors: list[float] = []
        self._error_next = 0
        self.weights: tuple[float, ...] | None = None

    @property
    def samples(self) -> int:
        return len(self._ys)

    @property
    def confident(self) -> bool:
        return self.weights is not None and len(self._ys) >= self.settings.min_samples

    def predict(self, x: Sequence[float]) -> float | None:
        """Milliseconds, or None while the model has too few samples to be trusted."""
        w = self.weights
        if w is None or len(self._ys) < self.settings.min_samples:
            return None
        y = w[0]
        for weight, v in zip(w[1:], x, strict=False):  # a longer x: its extra ignored
            y += weight * v
        return y if y > 0.0 else 0.0

    def observe(self, x: Sequence[float], y: float, now: float | None = None) -> None:
        """Learn one settled outcome. Non-finite or negative values are dropped (a clock step,
        a broken feed), never learned. ``now``: the clock's reading (seconds), which spaces the
        refits by ``refit_seconds``; None: by sample count alone."""
        if len(x) != self.features or not 0.0 <= y < math.inf:
            return
        # A plain loop, not generators: this runs for every settled exchange (issue 38's
        # overhead), and NaN fails the chained comparison as it fails isfinite.
        row = tuple(map(float, x))
        for v in row:
            if not 0.0 <= v < math.inf:
                return
        predicted = self.predict(row)
        if predicted is not None and y > 0.0:
            self._record_error(abs(predicted - y) / y)
        s = self.settings
        if len(self._ys) < s.window:
            self._xs.append(row)
            self._ys.append(y)
        else:
            self._xs[self._next] = row
            self._ys[self._next] = y
        self._next = (self._next + 1) % s.window
        self._since_fit += 1
        if len(self._ys) >= s.min_samples and (
            self.weights is None
            or (
                self._since_fit >= s.refit_every
                and (now is None or now - self._fitted_at >= s.refit_seconds)
            )
        ):
            self.weights = _robust_fit(self._xs, self._ys, self.features)
            self._since_fit = 0
            self._fitted_at = -math.inf if now is None else now

    def error_quantiles(self) -> tuple[float, float] | None:
        """(p50, p90) of the absolute percentage error over the recent window, as fractions."""
        if not self._errors:
            return None
        ordered = sorted(self._errors)
        return _quantile(ordered, 0.5), _quantile(ordered, 0.9)

    def error_mean(self) -> float | None:
        """The mean absolute percentage error (MAPE) over the recent window, as a fraction."""
        return sum(self._errors) / len(self._errors) if self._errors else None

    def _record_error(self, ape: float) -> None:
        if len(self._errors) < self.settings.error_window:
            self._errors.append(ape)
        else:
            self._errors[self._error_next] = ape
        self._error_next = (self._error_next + 1) % self.settings.error_window


def _quantile(ordered: list[float], q: float) -> float:
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def _robust_fit(
    xs: Sequence[tuple[float, ...]], ys: Sequence[float], features: int
) -> tuple[float, ...]:
    """Huber IRLS on (1, x) in relative terms: each sample weighs 1/y^2, so the fit minimises
    the percentage error (what MAPE and an SLO judge; a 40 ms prompt counts as much as a 4 s
    one), and the Huber weights from the relative residuals' median absolute deviation bound
    an outlier's pull (past ``TRIM`` bounds it is dropped). A feature that never varies (a
    colocated pool's KV tokens) gets a small ridge penalty, and a coefficient of zero rather
    than noise."""
    n = features + 1
    # An answer far faster than the window's typical one (a cached error) must not get a
    # relative weight thousands of times the others': y is floored at a quarter of the median.
    floor = max(sorted(ys)[len(ys) // 2] / 4, 1e-3)
    scale = [1.0 / max(y, floor) ** 2 for y in ys]
    weights = scale
    beta = [0.0] * n
    for _ in range(IRLS_ROUNDS):
        beta = _weighted_least_squares(xs, ys, weights, n)
        residuals = [(y - _dot(beta, x)) / max(y, 1e-3) for x, y in zip(xs, ys, strict=True)]
        spread = sorted(abs(r) for r in residuals)
        mad = spread[len(spread) // 2] / 0.6745
        if mad <= 1e-9:
            break
        bound = HUBER_K * mad
        weights = [
            s if abs(r) <= bound else s * bound / abs(r) if abs(r) <= TRIM * bound else 0.0
            for s, r in zip(scale, residuals, strict=True)
        ]
    return tuple(beta)


def _dot(beta: Sequence[float], x: Sequence[float]) -> float:
    y = beta[0]
    for i, v in enumerate(x):
        y += beta[i + 1] * v
    return y


def _weighted_least_squares(
    xs: Sequence[tuple[float, ...]], ys: Sequence[float], weights: Sequence[float], n: int
) -> list[float]:
    a = [[0.0] * n for _ in range(n)]
    b = [0.0] * n
    for x, y, w in zip(xs, ys, weights, strict=True):
        row = (1.0, *x)
        for i in range(n):
            wi = w * row[i]
            b[i] += wi * y
            ai = a[i]
            for j in range(i, n):
                ai[j] += wi * row[j]
    for i in range(n):
        for j in range(i):
            a[i][j] = a[j][i]
    for i in range(1, n):  # ridge on the slopes only, scaled to each feature's size
        a[i][i] += 1e-6 * a[i][i] + 1e-9
    return _solve(a, b)


def _solve(a: list[list[float]], b: list[float]) -> list[float]:
    """Gaussian elimination with partial pivoting on a small, regularised system."""
    n = len(b)
    for col in range(n):
        pivot = max(range(col, n), key=lambda r: abs(a[r][col]))
        if abs(a[pivot][col]) < 1e-12:
            continue
        a[col], a[pivot] = a[pivot], a[col]
        b[col], b[pivot] = b[pivot], b[col]
        for r in range(col + 1, n):
            f = a[r][col] / a[col][col]
            if f:
                for c in range(col, n):
                    a[r][c] -= f * a[col][c]
                b[r] -= f * b[col]
    out = [0.0] * n
    for r in range(n - 1, -1, -1):
        if abs(a[r][r]) < 1e-12:
            continue
        s = b[r] - sum(a[r][c] * out[c] for c in range(r + 1, n))
        out[r] = s / a[r][r]
    return out


@value
class Prediction:
    """What the decision reads: milliseconds, and whose model said it."""

    ttft_ms: float
    tpot_ms: float | None
    source: str  # "replica" or "pool"


class LatencyBook:
    """TTFT and TPOT models per pool and, with ``per_replica``, per (pool, replica), bounded in
    number (``max_keys``: replicas come from config and discovery, a runaway discovery must not
    grow memory). A replica's own model answers once confident, else its pool's; None: nobody
    knows yet."""

    __slots__ = ("_learned_at", "_pools", "_replicas", "max_keys", "per_replica", "settings")

    def __init__(
        self,
        settings: ModelSettings | None = None,
        max_keys: int = 1024,
        per_replica: bool = False,
    ) -> None:
        self.settings = settings or ModelSettings()
        self.max_keys = max_keys
        # Replica models double every observation's cost, and the decision predicts per pool
        # (the dispatch then picks the replica): they are learned only for a caller that
        # reads them (``per_replica``), not on every request for nobody.
        self.per_replica = per_replica
        self._pools: dict[str, tuple[LatencyModel, LatencyModel]] = {}
        self._replicas: dict[tuple[str, str], tuple[LatencyModel, LatencyModel]] = {}
        self._learned_at: dict[str, float] = {}

    def _pair(
        self, table: dict[K, tuple[LatencyModel, LatencyModel]], key: K
    ) -> tuple[LatencyModel, LatencyModel] | None:
        pair = table.get(key)
        if pair is None and len(self._pools) + len(self._replicas) < self.max_keys:
            pair = (
                LatencyModel(len(TTFT_FEATURES), self.settings),
                LatencyModel(len(TPOT_FEATURES), self.settings),
            )
            table[key] = pair
        return pair

    def observe(
        self,
        pool: str,
        replica: str,
        ttft_x: Sequence[float],
        ttft_ms: float | None,
        running: int,
        tpot_ms: float | None,
        tokens_in_flight: float = 0.0,
        now: float | None = None,
    ) -> None:
        """One settled exchange. ``None``: not measured (an error before the first token, a
        one-token answer's TPOT). ``now``: when it settled (spaces the refits, and the
        samples: at most ``learn_per_second`` a pool; None: every one is learned)."""
        rate = self.settings.learn_per_second
        if now is not None and rate > 0:
            if now - self._learned_at.get(pool, -math.inf) < 1.0 / rate:
                return
            if pool in self._learned_at or len(self._learned_at) < self.max_keys:
                self._learned_at[pool] = now
        pairs = [self._pair(self._pools, pool)]
        if self.per_replica:
            pairs.append(self._pair(self._replicas, (pool, replica)))
        for pair in pairs:
            if pair is None:
                continue
            if ttft_ms is not None:
                pair[0].observe(ttft_x, ttft_ms, now)
            if tpot_ms is not None:
                pair[1].observe((running, tokens_in_flight), tpot_ms, now)

    def predict(
        self,
        pool: str,
        replica: str | None,
        ttft_x: Sequence[float],
        running: int,
        tokens_in_flight: float = 0.0,
    ) -> Prediction | None:
        pair = self._replicas.get((pool, replica)) if replica is not None else None
        source = "replica"
        if pair is None or not pair[0].confident:
            pair, source = self._pools.get(pool), "pool"
        if pair is None:
            return None
        ttft = pair[0].predict(ttft_x)
        if ttft is None:
            return None
        return Prediction(ttft, pair[1].predict((running, tokens_in_flight)), source)

    def mean_errors(self) -> dict[str, tuple[float | None, float | None]]:
        """Per pool: (TTFT, TPOT) mean absolute percentage error, as fractions."""
        return {pool: (t.error_mean(), p.error_mean()) for pool, (t, p) in self._pools.items()}

    def errors(self) -> dict[str, tuple[tuple[float, float] | None, tuple[float, float] | None]]:
        """Per pool: (TTFT p50/p90, TPOT p50/p90) absolute percentage error, as fractions."""
        return {
            pool: (ttft.error_quantiles(), tpot.error_quantiles())
            for pool, (ttft, tpot) in self._pools.items()
        }
