"""The latency-predicted P/D decision, wired (issue 38): load features in, a pool role out.

At the choice, each of a variant's pools is described by what this gateway knows of it then
(:func:`features`): the tokens it would prefill (the prompt, less the prefix it probably holds),
the prompt tokens in flight on it, the requests sent to it whose first token has not come back
(its queue ahead of this request's first token), the KV tokens to move (PD only: the prefilled
ones), and for TPOT the requests running on it and the prompt tokens in flight (the prefills
a colocated engine's decode steps stall on). That snapshot is frozen into the route
(:class:`PredictedRoute`) so the outcome teaches each model with the load the request met, not
the load when it ended (:func:`learn`, from ``Routing.observe``).

With ``routing.latency.mode: decide`` and every pool's model confident,
:func:`gateway.routing.slo_choice.choose` picks the pool: the most headroom against the
request's :class:`Objective`, else the best prediction (interactive) or a 429 ``shed``
(sheddable, before any engine time). Until then, or with ``shadow``, the fixed threshold
decides and the predictions are only reported::

    prefill = {"pd": 2000, "colocated": 2000}
    route = predict_route(book, variant.by_role, prefill, objective, "decide")
    route.role, route.reason, route.ttft_ms("colocated")    # Role.COLOCATED, "meets_slo", 180.0
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Literal, Protocol

from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from gateway.errors import Shed
from gateway.routing.config import Role
from gateway.routing.latency import LatencyBook, Prediction
from gateway.routing.outcomes import ReplicaOutcome
from gateway.routing.slo_choice import SHED, Candidate, choose
from gateway.values import value
from gateway.wire.outcome import Outcome

Mode = Literal["off", "shadow", "decide"]
HEADER = b"x-gateway-predicted-ttft-ms"


class _PoolLoad(Protocol):
    """What the features read of a pool's load (the load book's ``PoolSnapshot`` is one: every
    gateway replica's figures when the load is shared)."""

    @property
    def name(self) -> str: ...
    @property
    def in_flight(self) -> int: ...
    @property
    def prompt_tokens(self) -> int: ...
    @property
    def starting(self) -> int: ...


@value
class Objective:
    """The request's latency objective (gateway/flow/slo.py resolved it) and its band's kind."""

    ttft_ms: int | None = None
    tpot_ms: int | None = None
    sheddable: bool = False


NO_OBJECTIVE = Objective()


@value
class PoolFeatures:
    """One pool's load as the request met it: the models' inputs."""

    ttft_x: tuple[float, float, float, float]
    """(tokens to prefill, prompt tokens in flight, requests starting, KV tokens to move)."""
    running: int
    prediction: Prediction | None


@value
class PredictedRoute:
    """The decision's inputs and result, carried by the route plan to the outcome."""

    pools: Mapping[str, PoolFeatures]
    role: Role | None
    """The role chosen on prediction; None: the fixed threshold decides."""
    reason: str | None

    def ttft_ms(self, pool: str) -> float | None:
        """The predicted TTFT of ``pool`` (the one that served), None while unsure."""
        found = self.pools.get(pool)
        return None if found is None or found.prediction is None else found.prediction.ttft_ms


def features(
    pool: _PoolLoad, prefill_tokens: int, pd: bool
) -> tuple[tuple[float, float, float, float], int]:
    """The TTFT inputs and the running count of ``pool`` now (the load book's snapshot)."""
    prefill = float(max(0, prefill_tokens))
    x = (
        prefill,
        float(pool.prompt_tokens),
        float(max(0, pool.starting)),
        prefill if pd else 0.0,
    )
    return x, pool.in_flight


def predict_route(
    book: LatencyBook,
    by_role: Mapping[Role, _PoolLoad],
    prefill: Mapping[str, int],
    objective: Objective,
    mode: Mode,
) -> PredictedRoute:
    """Each pool's features and prediction; in ``decide`` mode the role chosen (or a
    :class:`~gateway.errors.Shed` raised for a sheddable request no pool is predicted to
    serve in time). ``prefill``: per pool name, the tokens it would prefill."""
    pools: dict[str, PoolFeatures] = {}
    candidates = []
    roles = {}
    for role, pool in by_role.items():
        x, running = features(pool, prefill.get(pool.name, 0), role is Role.PD)
        prediction = book.predict(pool.name, None, x, running, x[1])
        pools[pool.name] = PoolFeatures(x, running, prediction)
        candidates.append(Candidate(pool.name, prediction))
        roles[pool.name] = role
    if mode != "decide" or len(candidates) < 2:
        return PredictedRoute(pools, None, None)
    choice = choose(candidates, objective.ttft_ms, objective.tpot_ms, objective.sheddable)
    if choice is None:
        return PredictedRoute(pools, None, None)
    if choice.reason == SHED:
        predicted = 0 if choice.ttft_ms is None else round(choice.ttft_ms)
        raise Shed(
            f"No pool is predicted to meet this request's latency objective (best TTFT "
            f"{predicted} ms); try again shortly.",
            headers={"retry-after": "1", HEADER.decode(): str(predicted)},
        )
    assert choice.name is not None
    return PredictedRoute(pools, roles[choice.name], choice.reason)


def learn(book: LatencyBook, route: PredictedRoute, outcome: Outcome, now: float) -> None:
    """Teach the serving pool's models from the request's one outcome, with the features
    frozen at the choice (failed, client-caused or unrouted outcomes teach nothing). ``now``:
    the app clock's monotonic reading, which spaces the samples and the refits."""
    found = ReplicaOutcome.of(outcome)
    if found is None or found.error:
        return
    snapshot = route.pools.get(found.pool)
    if snapshot is None:  # served by a pool outside the decision (a canary's baseline)
        return
    ttft = None if found.ttft is None else found.ttft * 1000
    tpot = None if found.tpot is None else found.tpot * 1000
    x = snapshot.ttft_x
    book.observe(found.pool, found.replica, x, ttft, snapshot.running, tpot, x[1], now)


class PredictionErrors(Collector):
    """``gateway_latency_prediction_error{pool, quantity, quantile}``: the p50/p90 absolute
    percentage error (a fraction) of each pool's TTFT and TPOT model, read at scrape time from
    the book (a sort of at most 256 numbers per model, not on the request path)."""

    def __init__(self) -> None:
        self.book: LatencyBook | None = None

    def collect(self) -> Iterator[GaugeMetricFamily]:
        """The quantiles, then the means (``..._error_mean{pool, quantity}``)."""
        family = GaugeMetricFamily(
            "gateway_latency_prediction_error",
            "Absolute percentage error (fraction) of each pool's latency model, p50 and p90",
            labels=["pool", "quantity", "quantile"],
        )
        mean = GaugeMetricFamily(
            "gateway_latency_prediction_error_mean",
            "Mean absolute percentage error (MAPE, fraction) of each pool's latency model",
            labels=["pool", "quantity"],
        )
        book = self.book
        if book is not None:
            for pool, pair in sorted(book.errors().items()):
                for quantity, errors in zip(("ttft", "tpot"), pair, strict=True):
                    if errors is not None:
                        family.add_metric([pool, quantity, "0.5"], errors[0])
                        family.add_metric([pool, quantity, "0.9"], errors[1])
            for pool, means in sorted(book.mean_errors().items()):
                for quantity, value in zip(("ttft", "tpot"), means, strict=True):
                    if value is not None:
                        mean.add_metric([pool, quantity], value)
        yield family
        yield mean
