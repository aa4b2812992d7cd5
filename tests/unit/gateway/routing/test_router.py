"""Per-model routing decisions: variants, prompt-length policy (real tokenizer), failover order."""

from __future__ import annotations

from typing import Any

import pytest

from gateway.config import ConfigError, GatewayConfig, parse_config
from gateway.errors import InvalidParameter
from gateway.routing.config import Role
from gateway.routing.pools import Pool
from gateway.routing.router import DEFAULT_VARIANT, ModelRouter
from gateway.tokens import TokenizerConfig, build_token_counter
from gateway.wire.request import Operation

POOLS = {
    "pd-a": {"urls": ["http://127.0.0.1:9001"]},
    "colo-a": {"urls": ["http://127.0.0.1:9002"]},
    "colo-b": {"urls": ["http://127.0.0.1:9003"]},
}


def config(model: dict[str, Any]) -> GatewayConfig:
    return parse_config({"pools": POOLS, "models": {"m": model}}, env={})


def router_for(model: dict[str, Any]) -> ModelRouter:
    cfg = config(model)
    pools = {name: Pool(name, p) for name, p in cfg.pools.items()}
    return ModelRouter("m", cfg.models["m"], pools)


TWO_POOLS = {
    "variants": {"stable": {"weight": 1, "pools": {"pd": "pd-a", "colocated": "colo-a"}}},
    "routing": {"pd_threshold_tokens": 50},
}


def names(plan: Any) -> list[tuple[str, str]]:
    return [(pool.name, reason) for pool, reason in plan.pools]


def test_threshold_edges_with_the_real_tokenizer() -> None:
    counter = build_token_counter(TokenizerConfig())
    router = router_for(TWO_POOLS)
    variant = router.variants["stable"]
    word = " lorem"
    # grow the message until the chat count (template overhead included) reaches the threshold
    text, payload = "", {}
    for _ in range(200):
        payload = {"messages": [{"role": "user", "content": text}]}
        if counter.count_request(Operation.CHAT, payload) >= 50:
            break
        text += word
    at = counter.count_request(Operation.CHAT, payload)
    below_payload = {"messages": [{"role": "user", "content": text[: -len(word)]}]}
    below = counter.count_request(Operation.CHAT, below_payload)
    assert at == 50 and below == 49  # " lorem" is one cl100k token
    assert names(router.plan(variant, at, None, None)) == [
        ("pd-a", "prompt_long"),
        ("colo-a", "prompt_long"),
    ]
    assert names(router.plan(variant, below, None, None)) == [
        ("colo-a", "prompt_short"),
        ("pd-a", "prompt_short"),
    ]


def test_long_output_and_hint_signals() -> None:
    router = router_for(
        {**TWO_POOLS, "routing": {"pd_threshold_tokens": 50, "pd_min_max_tokens": 1000}}
    )
    v = router.variants["stable"]
    assert router.plan(v, 10, 1000, None).pools[0][1] == "output_long"
    assert router.plan(v, 10, 999, None).pools[0][1] == "prompt_short"
    assert names(router.plan(v, 10_000, None, Role.COLOCATED))[0] == ("colo-a", "hint")


def test_too_long_for_colocated_has_no_failover() -> None:
    router = router_for(
        {**TWO_POOLS, "routing": {"pd_threshold_tokens": 50, "colocated_max_prompt_tokens": 400}}
    )
    v = router.variants["stable"]
    assert names(router.plan(v, 401, None, None)) == [("pd-a", "prompt_long")]
    assert len(router.plan(v, 400, None, None).pools) == 2


def test_single_pool_model_is_one_default_variant() -> None:
    router = router_for({"pool": "colo-a", "upstream_model": "up"})
    variant = router.choose_variant(b"anyone", None)
    assert variant.name == DEFAULT_VARIANT and variant.upstream_model == "up"
    assert names(router.plan(variant, 10**6, None, None)) == [("colo-a", "single_pool")]


CANARY = {
    "variants": {
        "stable": {"weight": 95, "pools": {"pd": "pd-a", "colocated": "colo-a"}},
        "canary": {"weight": 5, "pools": {"colocated": "colo-b"}, "upstream_model": "m-v2"},
    },
    "canary": {"min_requests": 5, "window_seconds": 30},
}


def test_forced_variant_and_unknown_variant() -> None:
    router = router_for(CANARY)
    assert router.choose_variant(b"k", "canary").name == "canary"
    with pytest.raises(InvalidParameter, match="no variant 'beta'"):
        router.choose_variant(b"k", "beta")


def test_set_weight_changes_the_split_and_lifts_rollback() -> None:
    router = router_for(CANARY)
    router.variants["canary"].rolled_back = True
    router.set_weight("canary", 100)
    router.set_weight("stable", 0)
    assert router.choose_variant(b"someone", None).name == "canary"
    assert not router.variants["canary"].rolled_back


def test_rollback_after_errors_in_the_window() -> None:
    now = [0.0]
    cfg = config(CANARY)
    pools = {name: Pool(name, p) for name, p in cfg.pools.items()}
    router = ModelRouter("m", cfg.models["m"], pools, clock=lambda: now[0])
    events: list[str] = []
    router.on_rollback = lambda variant, reason: events.append(variant.name)
    stable, canary = router.variants["stable"], router.variants["canary"]
    for _ in range(10):
        now[0] += 0.3
        router.observe(stable, False, 0.1)
        router.observe(canary, True, None)
    assert events == ["canary"] and canary.weight == 0 and canary.rolled_back
    assert router.choose_variant(b"anyone", None).name == "stable"


def test_carry_over_keeps_rollbacks_unless_the_variant_changed() -> None:
    old = router_for(CANARY)
    old.variants["canary"].weight, old.variants["canary"].rolled_back = 0.0, True
    same = router_for(CANARY)
    same.carry_over(old)
    assert same.variants["canary"].rolled_back and same.variants["canary"].weight == 0
    raised = {**CANARY, "variants": {**CANARY["variants"]}}
    raised["variants"]["canary"] = {**CANARY["variants"]["canary"], "weight": 10}
    changed = router_for(raised)
    changed.carry_over(old)
    assert not changed.variants["canary"].rolled_back and changed.variants["canary"].weight == 10


@pytest.mark.parametrize(
    ("model", "message"),
    [
        ({}, r"models\.m: give either `pool` or `variants`"),
        ({"pool": "colo-a", "variants": {}}, r"give either"),
        ({"pool": "nope"}, r"models\.m\.pool: unknown pool 'nope'"),
        (
            {"variants": {"s": {"weight": 1, "pools": {"pd": "nope"}}}},
            r"models\.m\.variants\.s\.pools\.pd: unknown pool 'nope'",
        ),
        (
            {"variants": {"s": {"weight": 1, "pools": {}}}},
            r"models\.m\.variants\.s\.pools: name a pd pool",
        ),
        (
            {"variants": {"s": {"weight": 1, "pools": {"pd": "pd-a"}}}, "canary": {}},
            r"models\.m\.canary\.baseline: no variant named 'stable'",
        ),
        ({"pool": "colo-a", "routing": {"pd_treshold": 3}}, r"models\.m\.routing\.pd_treshold"),
    ],
)
def test_config_errors_name_the_key(model: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        config(model)
