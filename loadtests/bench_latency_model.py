"""The cost of the online latency models (issue 38): a prediction, an observation (a refit
every ``refit_every`` of them, amortised in the figure) and the memory one model holds.

A pool's TTFT model (4 features) and TPOT model (1 feature) at their default window (128
samples), fed a mixed workload; prints microseconds per call, best of ``--rounds`` (the
machine is shared, so the best is the least disturbed), and the bytes a full model holds::

    .venv/bin/python loadtests/bench_latency_model.py [--rounds 5] [--calls 20000]
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from collections.abc import Callable

from gateway.routing.latency import TPOT_FEATURES, TTFT_FEATURES, LatencyBook, LatencyModel


def _rows(n: int, seed: int) -> list[tuple[float, float, float, float]]:
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        prefill = rng.randint(16, 64) if rng.random() < 0.5 else rng.randint(500, 2048)
        out.append((float(prefill), float(rng.randint(0, 4000)), float(rng.randint(0, 4)), 0.0))
    return out


def _best_us(fn: Callable[[], None], calls: int, rounds: int) -> float:
    best = float("inf")
    for _ in range(rounds):
        t0 = time.perf_counter()
        fn()
        best = min(best, (time.perf_counter() - t0) / calls * 1e6)
    return best


def _size(model: LatencyModel) -> int:
    xs, ys = model._xs, model._ys
    return (
        sys.getsizeof(xs)
        + sum(sys.getsizeof(r) + sum(sys.getsizeof(v) for v in r) for r in xs)
        + sys.getsizeof(ys)
        + sum(sys.getsizeof(v) for v in ys)
        + sys.getsizeof(model._errors)
        + sum(sys.getsizeof(v) for v in model._errors)
    )


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--calls", type=int, default=20_000)
    args = p.parse_args()
    rows = _rows(args.calls, 1)
    ys = [20 + 0.05 * a + 0.02 * b + 5 * c for a, b, c, _ in rows]

    ttft = LatencyModel(len(TTFT_FEATURES))
    for x, y in zip(rows[:512], ys[:512], strict=True):
        ttft.observe(x, y)

    def predict() -> None:
        for x in rows:
            ttft.predict(x)

    def observe() -> None:
        for x, y in zip(rows, ys, strict=True):
            ttft.observe(x, y)

    book = LatencyBook()
    for x, y in zip(rows[:512], ys[:512], strict=True):
        book.observe("pd", "r0", x, y, 8, 12.0)

    def book_predict() -> None:
        for x in rows:
            book.predict("pd", "r0", x, 8)

    tpot = LatencyModel(len(TPOT_FEATURES))
    for i in range(512):
        tpot.observe((float(i % 32),), 10 + 0.3 * (i % 32))
    print(f"TTFT predict      {_best_us(predict, args.calls, args.rounds):7.2f} us")
    print(f"book predict      {_best_us(book_predict, args.calls, args.rounds):7.2f} us")
    observed = _best_us(observe, args.calls, args.rounds)
    print(f"TTFT observe      {observed:7.2f} us (refit amortised)")
    print(f"TTFT model memory {_size(ttft):7d} bytes (window {ttft.settings.window})")
    print(f"TPOT model memory {_size(tpot):7d} bytes")


if __name__ == "__main__":
    main()
