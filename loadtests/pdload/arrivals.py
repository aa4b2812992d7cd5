"""Arrival schedules for the open loop: Poisson (exponential gaps) or constant rate.

Schedules are offsets in seconds from the start of a step, drawn from a seeded generator so a
run can be repeated exactly::

    list(itertools.islice(arrival_offsets("constant", 4.0, seed=1), 3))  # [0.0, 0.25, 0.5]
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from typing import Literal

Arrival = Literal["poisson", "constant"]


def arrival_offsets(kind: Arrival, rate: float, seed: int) -> Iterator[float]:
    """Endless send offsets for ``rate`` requests per second; the first request goes at 0."""
    if rate <= 0:
        raise ValueError("rate must be positive")
    rng = random.Random(seed)
    t = 0.0
    while True:
        yield t
        t += rng.expovariate(rate) if kind == "poisson" else 1.0 / rate
