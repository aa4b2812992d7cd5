"""A canary that fails costs latency, not errors: every failover path through the app's seam.

The canary pool's replica (host ``canary-a``) is made sick by a per-host script; the stable pool
(``stable-a``) answers. Every key sticks to the canary (weights 0/100) unless a test says other.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
from prometheus_client import REGISTRY, CollectorRegistry

from gateway.routing.router import ModelRouter
from tests.seam.harness import Gateway, running_gateway
from tests.seam.upstream import Script

CHAT = "/v1/chat/completions"
HEALTHY = {"default": Script()}


def sick(kind: str, **extra: Any) -> dict[str, Script]:
    return {**HEALTHY, "default@canary-a": Script(kind=kind, **extra)}


def canary_setup(weights: tuple[float, float] = (0, 100), **model: Any) -> dict[str, Any]:
    return {
        "pools": {
            "stable": {"urls": ["http://stable-a:8000"]},
            "canary": {"urls": ["http://canary-a:8000"]},
        },
        "models": {
            "m": {
                "variants": {
                    "stable": {"weight": weights[0], "pools": {"colocated": "stable"}},
                    "canary": {"weight": weights[1], "pools": {"colocated": "canary"}},
                },
                "canary": {"baseline": "stable", "min_requests": 5},
                **model,
            }
        },
    }


def chat(user: str = "u", **extra: Any) -> bytes:
    body = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "user": user}
    return orjson.dumps({**body, **extra})


def router(gw: Gateway) -> ModelRouter:
    return gw.state.table.models["m"].router


def metric(gw: Gateway, name: str, **labels: str) -> float:
    registry: CollectorRegistry = gw.state.metrics.registry
    assert registry is not REGISTRY
    value = registry.get_sample_value(name, labels)
    return 0.0 if value is None else value


def samples(gw: Gateway, variant: str) -> list[tuple[bool, float | None]]:
    window = router(gw).variants[variant].window
    return [(error, ttft) for _, error, ttft in window._events]


async def test_a_5xx_on_the_canary_is_served_by_stable_and_held_against_the_canary(
    tmp_path: Path,
) -> None:
    async with running_gateway(tmp_path, sick("status", status=500), **canary_setup()) as gw:
        reply = await gw.call(CHAT, chat(stream=True))
        assert reply.status == 200 and b"[DONE]" in reply.body
        assert reply.headers[b"x-gateway-variant"] == b"stable"
        assert reply.headers[b"x-gateway-route-reason"] == b"canary_failover"
        assert reply.headers[b"x-gateway-pool"] == b"stable"
        canary_upstream, stable_upstream = gw.upstreams[1], gw.upstreams[0]
        assert len(canary_upstream.sent) == 1 and len(stable_upstream.sent) == 1
        labels = {"model": "m", "variant": "canary", "cause": "status_5xx"}
        assert metric(gw, "gateway_canary_failovers_total", **labels) == 1
        assert samples(gw, "canary") == [(True, None)]
        assert samples(gw, "stable") == [(False, None)]  # its TTFT includes the canary's try
        ok = {"model": "m", "variant": "stable", "outcome": "ok"}
        assert metric(gw, "gateway_variant_requests_total", **ok) == 1
        bad = {"model": "m", "variant": "canary", "outcome": "error"}
        assert metric(gw, "gateway_variant_requests_total", **bad) == 1
        assert reply.outcome is not None and reply.outcome.route.variant == "stable"


async def test_connect_errors_and_first_byte_timeouts_fail_over_too(tmp_path: Path) -> None:
    for kind, cause in (("connect_error", "connect"), ("timeout", "timeout")):
        async with running_gateway(tmp_path, sick(kind), **canary_setup()) as gw:
            reply = await gw.call(CHAT, chat())
            assert reply.status == 200, reply.body
            assert reply.headers[b"x-gateway-route-reason"] == b"canary_failover"
            labels = {"model": "m", "variant": "canary", "cause": cause}
            assert metric(gw, "gateway_canary_failovers_total", **labels) == 1


async def test_a_canary_with_no_replica_left_hands_over_without_an_attempt(tmp_path: Path) -> None:
    retries = {"budget_ratio": 0, "budget_min_per_second": 0, "max_attempts": 1}
    async with running_gateway(tmp_path, HEALTHY, **canary_setup(), retries=retries) as gw:
        canary_pool = gw.state.table.pools["canary"]
        canary_pool.trip(canary_pool.replicas[0], "refused")  # the breaker ejected it
        reply = await gw.call(CHAT, chat())
        assert reply.status == 200
        assert reply.headers[b"x-gateway-route-reason"] == b"canary_failover"
        assert gw.upstreams[1].sent == []
        labels = {"model": "m", "variant": "canary", "cause": "unavailable"}
        assert metric(gw, "gateway_canary_failovers_total", **labels) == 1
        assert samples(gw, "canary") == [(True, None)]


async def test_successful_canary_requests_stay_on_the_canary(tmp_path: Path) -> None:
    async with running_gateway(tmp_path, HEALTHY, **canary_setup((50, 50))) as gw:
        seen = {}
        for user in ("a", "b", "c", "d", "e", "f"):
            first = await gw.call(CHAT, chat(user))
            again = await gw.call(CHAT, chat(user))
            variant = first.headers[b"x-gateway-variant"]
            assert again.headers[b"x-gateway-variant"] == variant  # sticky
            assert first.headers[b"x-gateway-route-reason"] == b"single_pool"
            seen[user] = variant
        assert set(seen.values()) == {b"stable", b"canary"}


async def test_no_failover_past_the_retry_budget(tmp_path: Path) -> None:
    retries = {"budget_ratio": 0, "budget_min_per_second": 0}  # the bucket's 10, then none
    setup = {**canary_setup(), "retries": retries}
    async with running_gateway(tmp_path, sick("status", status=500), **setup) as gw:
        replies = []
        for _ in range(11):
            canary_pool = gw.state.table.pools["canary"]
            canary_pool.replicas[0].breaker.record(True)  # keep the canary in rotation
            replies.append(await gw.call(CHAT, chat()))
        assert [r.status for r in replies] == [200] * 10 + [500]
        last = replies[-1]
        assert last.headers[b"x-gateway-variant"] == b"canary"  # the canary's own answer
        assert metric(gw, "gateway_upstream_retries_refused_total", model="m") == 1


async def test_a_forced_canary_is_not_failed_over(tmp_path: Path) -> None:
    setup = canary_setup(routing={"force_headers": "always"})
    async with running_gateway(tmp_path, sick("status", status=500), **setup) as gw:
        reply = await gw.call(CHAT, chat(), headers=((b"x-gateway-variant", b"canary"),))
        assert reply.status == 500 and reply.headers[b"x-gateway-variant"] == b"canary"


async def test_stable_failing_after_a_failover_is_an_error_for_both(tmp_path: Path) -> None:
    scripts = {"default": Script(kind="status", status=503)}
    async with running_gateway(tmp_path, scripts, **canary_setup()) as gw:
        reply = await gw.call(CHAT, chat())
        assert reply.status == 503
        assert reply.headers[b"x-gateway-route-reason"] == b"canary_failover"
        assert samples(gw, "canary") == [(True, None)]
        assert samples(gw, "stable") == [(True, None)]


async def test_keys_of_a_rolled_back_canary_say_so(tmp_path: Path) -> None:
    async with running_gateway(tmp_path, HEALTHY, **canary_setup((50, 50))) as gw:
        users = [f"user-{i}" for i in range(12)]
        before = {u: (await gw.call(CHAT, chat(u))).headers[b"x-gateway-variant"] for u in users}
        canary = router(gw).variants["canary"]
        router(gw).roll_back(canary, "test", "here", decided_here=True)
        for user in users:
            reply = await gw.call(CHAT, chat(user))
            assert reply.headers[b"x-gateway-variant"] == b"stable"
            expected = b"canary_rolled_back" if before[user] == b"canary" else b"single_pool"
            assert reply.headers[b"x-gateway-route-reason"] == expected
        rollbacks = {"model": "m", "variant": "canary"}
        assert metric(gw, "gateway_canary_rollbacks_total", **rollbacks) == 1
        assert metric(gw, "gateway_variant_rolled_back", **rollbacks) == 1
        await gw.state.canaries.set_weight(router(gw), "canary", 50, "ops-key")
        assert not canary.rolled_back and canary.reenabled is not None
        assert canary.reenabled.by == "ops-key"
        assert metric(gw, "gateway_canary_reenables_total", **rollbacks) == 1
        assert metric(gw, "gateway_variant_rolled_back", **rollbacks) == 0
        back = {u: (await gw.call(CHAT, chat(u))).headers[b"x-gateway-variant"] for u in users}
        assert back == before  # the same keys, on the same variants again
