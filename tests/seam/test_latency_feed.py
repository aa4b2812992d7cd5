"""The latency-predicted P/D decision through create_app's seams (issue 38): what the served
exchanges teach (with the pools' load at the choice), what decides (the fixed threshold until
every model is confident; off by default), and where the prediction and reason show (response
header, outcome's route facts for the span and access log, the decisions metric, the
prediction-error metric); sheddable requests no pool is predicted to serve in time are a 429."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson

from gateway.middleware import outcome_fields
from gateway.routing.latency import LatencyBook
from gateway.telemetry import attributes as attr
from gateway.telemetry.server import request_facts
from tests.seam.harness import Gateway, running_gateway
from tests.seam.upstream import Script

CHAT = "/v1/chat/completions"
HEADER = b"x-gateway-predicted-ttft-ms"


def chat(words: int = 1) -> bytes:
    text = " ".join(["hi"] * words)
    body = {"model": "m", "messages": [{"role": "user", "content": text}], "stream": True}
    return orjson.dumps(body)


def two_pools(mode: str, **extra: Any) -> dict[str, Any]:
    """A PD pool and a colocated one, the threshold high (every prompt here is short)."""
    return {
        "pools": {
            "pd": {"urls": ["http://pd-a:8000"]},
            "colocated": {"urls": ["http://colo-a:8000"]},
        },
        "models": {
            "m": {
                "routing": {"pd_threshold_tokens": 4096, "latency": {"mode": mode}},
                "variants": {
                    "stable": {"weight": 1, "pools": {"pd": "pd", "colocated": "colocated"}}
                },
            }
        },
        **extra,
    }


def seed(book: LatencyBook, pool: str, ttft_ms: float, tpot_ms: float = 10.0) -> None:
    """Make ``pool``'s models confident: TTFT ``ttft_ms`` whatever the load, TPOT ``tpot_ms``."""
    for i in range(book.settings.min_samples):
        x = (float(10 + i), 0.0, 0.0, 0.0)
        book.observe(pool, "seed", x, ttft_ms, 1 + i % 3, tpot_ms)


def decisions(gw: Gateway, pool: str, reason: str) -> float:
    labels = {"model": "m", "variant": "stable", "pool": pool, "reason": reason}
    found = gw.state.metrics.registry.get_sample_value("gateway_routing_decisions_total", labels)
    return found or 0.0


async def test_off_by_default_nothing_learned_no_header(tmp_path: Path) -> None:
    async with running_gateway(tmp_path, {"default": Script()}, **two_pools("off")) as gw:
        for _ in range(20):
            reply = await gw.call(CHAT, chat())
            assert reply.status == 200 and HEADER not in reply.headers
            assert reply.headers[b"x-gateway-route-reason"] == b"prompt_short"
        assert gw.state.latency.errors() == {}  # no model was even made


async def test_served_exchanges_teach_the_pools_model_with_the_load_at_the_choice(
    tmp_path: Path,
) -> None:
    async with running_gateway(tmp_path, {"default": Script()}, **two_pools("shadow")) as gw:
        book = gw.state.latency
        needed = book.settings.min_samples
        spacing = 1.0 / book.settings.learn_per_second
        for _ in range(needed - 1):
            reply = await gw.call(CHAT, chat())
            assert reply.status == 200 and HEADER not in reply.headers  # not confident yet
            gw.clock.advance(spacing)
        reply = await gw.call(CHAT, chat())
        assert book._pools["colocated"][0].samples == needed  # each exchange learned once
        for _ in range(5):  # settled within one spacing of the last: not learned
            assert (await gw.call(CHAT, chat())).status == 200
        assert book._pools["colocated"][0].samples == needed
        gw.clock.advance(spacing)
        assert "pd" not in book._pools  # it served nothing: it learned nothing
        # Shadow: the threshold still decides; the next request carries the prediction.
        reply = await gw.call(CHAT, chat())
        assert reply.headers[b"x-gateway-route-reason"] == b"prompt_short"
        assert reply.headers[HEADER].isdigit()  # whole milliseconds (near 0 on this harness)


async def test_a_request_met_the_load_of_the_one_before_it_still_in_flight(
    tmp_path: Path,
) -> None:
    """The features are the pool's load when the request was routed: a second request sent
    while the first is still waiting for its first token sees one starting request and its
    prompt tokens in flight."""
    import asyncio

    held = asyncio.Event()
    scripts = {"default": Script(), "held": Script(first_token=held)}
    async with running_gateway(tmp_path, scripts, **two_pools("shadow")) as gw:
        body = orjson.loads(chat(5))
        first = asyncio.create_task(gw.call(CHAT, orjson.dumps({**body, "script": "held"})))
        for _ in range(50):
            await asyncio.sleep(0)
            if gw.state.table.pools["colocated"].load().starting:
                break
        assert gw.state.table.pools["colocated"].load().starting == 1
        assert (await gw.call(CHAT, chat())).status == 200
        gw.clock.advance(1.0)  # a second apart: both outcomes are learned
        held.set()
        assert (await first).status == 200
        second_x, first_x = gw.state.latency._pools["colocated"][0]._xs  # second settled first
        assert first_x[1] == 0.0 and first_x[2] == 0.0  # nothing in flight when it was routed
        assert second_x[2] == 1.0  # one request starting ahead of it
        assert second_x[1] == first_x[0] > 0  # the first's prompt tokens in flight
        assert second_x[3] == 0.0 and first_x[3] == 0.0  # colocated: no KV to move


async def test_decide_routes_to_the_pool_predicted_to_meet_the_slo(tmp_path: Path) -> None:
    slo = {"slo": {"bands": {"standard": {"ttft_ms": 500}}}}
    async with running_gateway(tmp_path, {"default": Script()}, **two_pools("decide", **slo)) as gw:
        book = gw.state.latency
        seed(book, "pd", 120.0)
        reply = await gw.call(CHAT, chat())  # PD's model alone: the threshold decides
        assert reply.headers[b"x-gateway-route-reason"] == b"prompt_short"
        seed(book, "colocated", 900.0)  # colocated predicted past the 500 ms objective
        reply = await gw.call(CHAT, chat())
        assert reply.status == 200
        assert reply.headers[b"x-gateway-pool"] == b"pd"  # a short prompt, on prediction
        assert reply.headers[b"x-gateway-route-reason"] == b"meets_slo"
        assert reply.headers[HEADER] == b"120"
        assert decisions(gw, "pd", "meets_slo") == 1.0
        assert reply.outcome is not None
        assert reply.outcome.route.predicted_ttft_ms == 120.0
        assert outcome_fields(reply.outcome)["predicted_ttft_ms"] == 120.0  # the access log
        facts = request_facts(reply.outcome)  # what the server and client spans carry
        assert facts[attr.PREDICTED_TTFT] == 120.0
        assert facts[attr.ROUTING_REASON] == "meets_slo"


async def test_none_predicted_in_time_best_effort_or_shed_by_band(tmp_path: Path) -> None:
    flow = {"flow": {"tenant_bands": {}}}
    async with running_gateway(
        tmp_path, {"default": Script()}, **two_pools("decide", **flow)
    ) as gw:
        seed(gw.state.latency, "pd", 800.0)
        seed(gw.state.latency, "colocated", 600.0)
        tight = ((b"x-slo-ttft-ms", b"300"),)
        reply = await gw.call(CHAT, chat(), headers=tight)  # standard: interactive kind
        assert reply.status == 200
        assert reply.headers[b"x-gateway-pool"] == b"colocated"  # the better of two misses
        assert reply.headers[b"x-gateway-route-reason"] == b"best_effort"
        shed = ((b"x-gateway-priority", b"sheddable"), *tight)
        reply = await gw.call(CHAT, chat(), headers=shed)
        assert reply.status == 429
        assert reply.json()["error"]["code"] == "shed"
        assert reply.headers[b"retry-after"] == b"1"
        assert reply.headers[HEADER] == b"600"
        assert decisions(gw, "", "shed") == 1.0
        assert [len(u.sent) for u in gw.upstreams] == [0, 1]  # the shed one reached no engine


async def test_a_client_may_tighten_its_objective_never_loosen_it(tmp_path: Path) -> None:
    slo = {"slo": {"bands": {"standard": {"ttft_ms": 500}}}}
    async with running_gateway(tmp_path, {"default": Script()}, **two_pools("decide", **slo)) as gw:
        reply = await gw.call(CHAT, chat(), headers=((b"x-slo-ttft-ms", b"900"),))
        assert reply.status == 400
        assert reply.json()["error"]["param"] == "x-slo-ttft-ms"
        reply = await gw.call(CHAT, chat(), headers=((b"x-slo-ttft-ms", b"400"),))
        assert reply.status == 200


async def test_the_prediction_error_metric_per_pool(tmp_path: Path) -> None:
    async with running_gateway(tmp_path, {"default": Script()}, **two_pools("shadow")) as gw:
        book = gw.state.latency
        seed(book, "colocated", 100.0)
        book.observe("colocated", "seed", (10.0, 0.0, 0.0, 0.0), 125.0, 1, 10.0)  # 20% off
        registry = gw.state.metrics.registry
        p90 = registry.get_sample_value(
            "gateway_latency_prediction_error",
            {"pool": "colocated", "quantity": "ttft", "quantile": "0.9"},
        )
        assert p90 is not None and abs(p90 - 0.2) < 0.01
        reply = await gw.get("/metrics")
        assert b"gateway_latency_prediction_error" in reply.body
