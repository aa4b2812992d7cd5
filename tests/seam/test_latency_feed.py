"""The latency models learn from the outcome feed through create_app's seam: each served
exchange teaches its pool's and replica's TTFT model once; until min_samples the book predicts
nothing (the fixed threshold decides), then it does."""

from __future__ import annotations

from pathlib import Path

import orjson

from tests.seam.harness import running_gateway
from tests.seam.upstream import Script

CHAT = "/v1/chat/completions"


def chat() -> bytes:
    body = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "stream": True}
    return orjson.dumps(body)


async def test_served_exchanges_teach_the_pools_latency_model(tmp_path: Path) -> None:
    async with running_gateway(tmp_path, {"default": Script()}) as gw:
        book = gw.state.latency
        needed = book.settings.min_samples
        for _ in range(needed - 1):
            assert (await gw.call(CHAT, chat())).status == 200
        outcome = next(o for o in gw.outcomes if o.admitted)
        pool, replica = outcome.route.pool, outcome.route.replica
        assert pool is not None and replica is not None
        x = (float(outcome.usage.input_tokens), 0.0, 0.0, 0.0)
        assert book.predict(pool, replica, x, 1) is None  # too few: the threshold decides
        assert (await gw.call(CHAT, chat())).status == 200
        predicted = book.predict(pool, replica, x, 1)
        assert predicted is not None and predicted.ttft_ms >= 0.0
        assert book._pools[pool][0].samples == needed  # each exchange learned once
