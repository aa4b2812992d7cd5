"""The gate's count of each tenant's requests past it, and who holds the most (flow.reserve)."""

from __future__ import annotations

import random

from gateway.flow.config import FlowConfig
from gateway.flow.gate import FlowGate, Waited


def test_the_most_held_follows_every_pass_and_end() -> None:
    gate = FlowGate(FlowConfig(enabled=True))
    rng = random.Random(25)
    passed: list[Waited] = []
    for _ in range(2000):
        if passed and rng.random() < 0.5:
            gate.done(passed.pop(rng.randrange(len(passed))))
        else:
            waited = Waited("standard", rng.choice("abcd"))
            gate._pass(waited)
            passed.append(waited)
        assert gate.most == max(gate.held.values(), default=0)
        assert sum(gate.held.values()) == len(passed)
    for waited in passed:
        gate.done(waited)
        gate.done(waited)  # a second end of the same request counts nothing
    assert gate.held == {} and gate.most == 0
