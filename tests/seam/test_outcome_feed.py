"""The per-replica outcome feed through the app factory's seam: every settled exchange a replica
answered reaches the feed's subscribers once (create_app registers the pools' books), with its
pool, replica, tokens and error; a refused request, or a client's 4xx, reports nothing."""

from __future__ import annotations

from pathlib import Path

import orjson

from gateway.routing.outcomes import ReplicaOutcome
from tests.seam.harness import running_gateway
from tests.seam.upstream import Script

CHAT = "/v1/chat/completions"


def chat(model: str = "m") -> bytes:
    body = {"model": model, "messages": [{"role": "user", "content": "hi"}], "stream": True}
    return orjson.dumps(body)


async def test_each_served_exchange_is_fed_once_to_its_pool_and_replica(tmp_path: Path) -> None:
    async with running_gateway(tmp_path, {"default": Script()}) as gw:
        fed: list[ReplicaOutcome] = []
        gw.state.outcomes.subscribe(fed.append)
        assert (await gw.call(CHAT, chat())).status == 200
        assert (await gw.call(CHAT, chat(model="nope"))).status == 404  # refused: no replica
        assert len(fed) == 1
        got = fed[0]
        outcome = next(o for o in gw.outcomes if o.admitted)
        assert (got.model, got.pool, got.replica) == (
            "m",
            outcome.route.pool,
            outcome.route.replica,
        )
        assert got.prompt_tokens == outcome.usage.input_tokens and not got.error
        assert got.ttft == outcome.time_to_first_token
        pool = gw.state.table.pools[got.pool]
        figures = pool.outcomes.figures(got.replica)  # the book create_app subscribed
        assert figures is not None and figures.exchanges == 1


async def test_an_upstream_failure_is_fed_as_an_error(tmp_path: Path) -> None:
    async with running_gateway(tmp_path, {"default": Script(kind="status", status=500)}) as gw:
        fed: list[ReplicaOutcome] = []
        gw.state.outcomes.subscribe(fed.append)
        assert (await gw.call(CHAT, chat())).status == 500  # the upstream's own answer, relayed
        assert fed and all(f.error and f.ttft is None for f in fed)
