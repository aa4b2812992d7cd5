"""The cost of the prefix index per request: hashing a prompt's blocks, matching and recording.

A chat prompt of about 1,000 tokens (cl100k_base, template overhead included: it is sized with
the gateway's own counter) is cut into 64-character blocks and hashed, then matched against and
recorded in a pool's index holding 32,768 block names (its default bound), as routing does for
every request of a model with ``routing.prefix.enabled``. Prints microseconds per call (best of
``--rounds``; the machine is shared, so the best is the least disturbed)::

    .venv/bin/python loadtests/bench_prefix.py [--tokens 1000] [--rounds 7] [--calls 2000]
"""

from __future__ import annotations

import argparse
import random
import time
from collections.abc import Callable
from typing import Any

from gateway.routing.prefix import PrefixIndex, prompt_blocks
from gateway.tokens import TokenizerConfig, build_token_counter
from gateway.wire.request import Operation

WORDS = ("river", "bridge", "town", "market", "harbour", "lantern", "orchard", "meadow")


def prompt_of(tokens: int, seed: int) -> dict[str, Any]:
    counter = build_token_counter(TokenizerConfig())
    rng = random.Random(seed)
    text = ""
    payload: dict[str, Any] = {"messages": [{"role": "user", "content": text}]}
    while counter.count_request(Operation.CHAT, payload) < tokens:
        text += " ".join(rng.choice(WORDS) for _ in range(20)) + ". "
        payload = {"messages": [{"role": "system", "content": "Be brief."},
                                {"role": "user", "content": text}]}  # fmt: skip
    return payload


def best_us(fn: Callable[[], object], calls: int, rounds: int) -> float:
    best = float("inf")
    for _ in range(rounds):
        started = time.perf_counter()
        for _ in range(calls):
            fn()
        best = min(best, (time.perf_counter() - started) / calls)
    return best * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--calls", type=int, default=2000)
    args = parser.parse_args()
    payload = prompt_of(args.tokens, seed=1)

    def hash_blocks() -> object:
        return prompt_blocks(Operation.CHAT, payload, block_chars=64, max_blocks=512, seed=b"m")

    blocks = prompt_blocks(Operation.CHAT, payload, block_chars=64, max_blocks=512, seed=b"m")
    index = PrefixIndex(32768, replicas=4)
    for n in range(32768 // max(1, len(blocks.hashes)) + 1):  # full: the LRU evicts as it goes
        index.record(prompt_blocks(Operation.CHAT, prompt_of(300, n + 2), block_chars=64,
                                   max_blocks=512, seed=b"m"), n % 4)  # fmt: skip
    index.record(blocks, 1)
    chars = sum(len(m["content"]) for m in payload["messages"])
    print(f"prompt: {args.tokens} tokens, {chars} characters, {len(blocks.hashes)} blocks")
    timings = {
        "hash the blocks": hash_blocks,
        "match (all cached)": lambda: index.match(blocks),
        "record (all present)": lambda: index.record(blocks, 2),
    }
    for what, fn in timings.items():
        print(f"{what + ':':24}{best_us(fn, args.calls, args.rounds):8.1f} us")
    print(f"index: {len(index)} block names")


if __name__ == "__main__":
    main()
