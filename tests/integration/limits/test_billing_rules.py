"""The billing rules of issue 11, probed against a real gateway process and the simulator.

Each probe is a way a client could once dodge billing or limits: leave right after the first
chunk (prefill done), send a body nested deeper than the gateway can re-serialise, share one
``x-request-id`` between concurrent requests, ask for ``n`` completions or a large
``max_completion_tokens``, or be in flight while a reload removes its pool.
"""

from __future__ import annotations

import json
import signal
import time
from pathlib import Path

import httpx
import pytest
import tiktoken
import yaml

from gateway.tokens import TokenizerConfig, build_token_counter
from tests.gatewayproc import start_gateway
from tests.integration.limits.limitsetup import MODEL, ledger_rows, limited_config
from tests.simproc import start_sim

SLOW = ["--ttft-base-ms", "0", "--ttft-per-token-ms", "0", "--itl-ms", "20"]
PROMPT = "Tell me everything about prefill and decode. " * 40


@pytest.fixture(scope="module")
def cl100k() -> tiktoken.Encoding:
    build_token_counter(TokenizerConfig())  # the gateway's default, installed offline
    return tiktoken.get_encoding("cl100k_base")


def chat(**extra: object) -> dict[str, object]:
    return {"model": MODEL, "messages": [{"role": "user", "content": PROMPT}], **extra}


def wait_rows(db: Path, count: int) -> list[dict[str, object]]:
    deadline = time.monotonic() + 10
    while True:
        rows = ledger_rows(db) if db.exists() else []
        if len(rows) >= count or time.monotonic() > deadline:
            return rows
        time.sleep(0.05)


def test_leaving_after_the_first_chunk_is_charged_the_prompt(
    tmp_path: Path, cl100k: tiktoken.Encoding
) -> None:
    with (
        start_sim("--model", MODEL, *SLOW) as sim,
        start_gateway(limited_config(sim.url, tmp_path, limits={}), tmp_path) as gateway,
    ):
        url = gateway.base_url + "/chat/completions"
        body = chat(stream=True, max_tokens=300)
        with httpx.stream("POST", url, json=body, headers={"x-request-id": "leaver"}) as reply:
            assert reply.status_code == 200
            next(reply.iter_lines())  # the first chunk: prefill is done; then hang up
        (row,) = wait_rows(tmp_path / "gateway.db", 1)
    assert row["correlation_id"] == "leaver" and row["status"] == 499
    assert row["input_tokens"] >= len(cl100k.encode(PROMPT))  # counted, never zero
    assert row["partial"]


def test_a_deep_body_is_a_400_and_leaks_no_slot(tmp_path: Path) -> None:
    deep: object = "x"
    for _ in range(300):
        deep = [deep]
    raw = json.dumps({**chat(stream=True, max_tokens=1), "deep": deep})
    limits = {"defaults": {"concurrent_requests": 1}}
    with (
        start_sim("--model", MODEL, "--no-delay") as sim,
        start_gateway(limited_config(sim.url, tmp_path, limits=limits), tmp_path) as gateway,
    ):
        url = gateway.base_url + "/chat/completions"
        headers = {"content-type": "application/json"}
        for _ in range(5):
            refused = httpx.post(url, content=raw, headers=headers)
            assert refused.status_code == 400 and "forwarded" in refused.json()["error"]["message"]
        assert httpx.post(url, json=chat(max_tokens=1)).status_code == 200  # no slot leaked


def test_a_shared_request_id_does_not_widen_the_concurrency_limit(tmp_path: Path) -> None:
    limits = {"defaults": {"concurrent_requests": 1}}
    with (
        start_sim("--model", MODEL, *SLOW) as sim,
        start_gateway(limited_config(sim.url, tmp_path, limits=limits), tmp_path) as gateway,
    ):
        url = gateway.base_url + "/chat/completions"
        same = {"x-request-id": "same-id"}
        with httpx.stream(
            "POST", url, json=chat(stream=True, max_tokens=100, ignore_eos=True), headers=same
        ) as a:
            lines = a.iter_lines()
            next(lines)  # running: its slot is taken
            second = httpx.post(url, json=chat(max_tokens=1), headers=same)
            assert second.status_code == 429
            assert a.headers["x-request-id"] == "same-id"  # echoed as a correlation id
            assert a.headers["x-gateway-request-id"] != "same-id"


def test_n_and_max_completion_tokens_are_reserved(tmp_path: Path) -> None:
    limits = {"defaults": {"tokens_per_minute": 2000}}
    with (
        start_sim("--model", MODEL, "--no-delay") as sim,
        start_gateway(limited_config(sim.url, tmp_path, limits=limits), tmp_path) as gateway,
    ):
        url = gateway.base_url + "/chat/completions"
        body = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}]}
        too_many = httpx.post(url, json={**body, "n": 4, "max_tokens": 600})
        assert too_many.status_code == 429  # 4 x 600 > 2000
        capped = httpx.post(url, json={**body, "max_tokens": 10, "max_completion_tokens": 2500})
        assert capped.status_code == 429  # vLLM obeys max_completion_tokens: 2500 reserved
        assert httpx.post(url, json={**body, "n": 2, "max_tokens": 5}).status_code == 200


def test_a_reload_that_removes_the_pool_never_fails_a_request_in_flight(tmp_path: Path) -> None:
    with (
        start_sim("--model", MODEL, *SLOW) as old,
        start_sim("--model", MODEL, "--no-delay") as new,
    ):
        config = limited_config(old.url, tmp_path, limits={})
        with start_gateway(config, tmp_path) as gateway:
            url = gateway.base_url + "/chat/completions"
            body = chat(stream=True, max_tokens=40, ignore_eos=True)  # the whole cap: 0.8 s
            with httpx.stream("POST", url, json=body, timeout=30) as running:
                lines = running.iter_lines()
                next(lines)
                moved = {**config, "pools": {"other": {"urls": [new.url]}}}
                moved["models"] = {MODEL: {"pool": "other"}}
                cfg_path = next(tmp_path.glob("gateway-*.yaml"))
                cfg_path.write_text(yaml.safe_dump(moved))
                gateway.proc.send_signal(signal.SIGHUP)
                deadline = time.monotonic() + 10
                while (
                    httpx.post(url, json=chat(max_tokens=1)).headers.get("x-gateway-pool")
                    != "other"
                ):
                    assert time.monotonic() < deadline, "the reload never took effect"
                    time.sleep(0.05)
                rest = b"\n".join(line.encode() for line in lines)
            assert running.status_code == 200
            assert b"[DONE]" in rest and b'"error"' not in rest  # finished on its old pool
