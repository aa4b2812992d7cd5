"""The usage ledger through a real gateway process: one row per request, streaming or not, cut
or failed; token counts equal the upstream's usage (or, for cut streams, what was delivered,
counted with the gateway's tokenizer); SIGTERM mid-load loses no row."""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import openai
import orjson
import pytest
import tiktoken

from gateway.tokens import TokenizerConfig, build_token_counter
from tests.gatewayproc import GatewayProcess, start_gateway
from tests.integration.limits.limitsetup import MODEL, STEERING, ledger_rows
from tests.simproc import SimProcess, start_sim

MESSAGES = [{"role": "user", "content": "tell me about the river and the stone"}]


@pytest.fixture(scope="module")
def cl100k() -> tiktoken.Encoding:
    build_token_counter(TokenizerConfig())  # the gateway's default, installed offline
    return tiktoken.get_encoding("cl100k_base")


@pytest.fixture
def sim() -> Iterator[SimProcess]:
    zero = ["--ttft-base-ms", "0", "--ttft-per-token-ms", "0", "--itl-ms", "0"]
    with start_sim("--model", MODEL, "--max-model-len", "4096", *zero) as process:
        yield process


def config(sim: SimProcess, tmp_path: Path, **accounting: Any) -> dict[str, Any]:
    return {
        "pools": {"sim": {"urls": [sim.url], "forward_headers": STEERING}},
        "models": {MODEL: {"pool": "sim"}},
        "storage": {"url": f"sqlite:///{tmp_path}/ledger.db"},
        "accounting": {"ledger_interval": 0.1, **accounting},
        "server": {"access_log": False},
    }


def stream_lines(
    gateway: GatewayProcess,
    request_id: str,
    body: dict[str, Any],
    *,
    headers: dict[str, str],
    keep: int | None = None,
) -> list[dict[str, Any]]:
    """The stream's JSON events as the client got them; stop reading after ``keep`` events."""
    events: list[dict[str, Any]] = []
    with httpx.stream(
        "POST",
        gateway.base_url + "/chat/completions",
        json={"model": MODEL, "messages": MESSAGES, "stream": True, **body},
        headers={"x-request-id": request_id, **headers},
        timeout=10,
    ) as response:
        for line in response.iter_lines():
            if line.startswith("data: {"):
                events.append(orjson.loads(line[6:]))
                if keep is not None and len(events) >= keep:
                    break  # leaving the block closes the connection mid-stream
    return events


def text_of(events: list[dict[str, Any]]) -> str:
    return "".join(
        (c.get("delta") or {}).get("content") or "" for e in events for c in e.get("choices", [])
    )


def wait_for_rows(db: Path, count: int, timeout: float = 10) -> dict[str, dict[str, Any]]:
    deadline = time.monotonic() + timeout
    while True:
        rows = ledger_rows(db) if db.exists() else []
        if len(rows) >= count or time.monotonic() > deadline:
            return {r["correlation_id"]: r for r in rows}  # the client's own ids
        time.sleep(0.05)


def test_one_row_per_request_with_the_upstreams_usage(
    sim: SimProcess, tmp_path: Path, cl100k: tiktoken.Encoding
) -> None:
    with start_gateway(config(sim, tmp_path), tmp_path) as gateway:
        client = openai.OpenAI(base_url=gateway.base_url, api_key="unused", max_retries=0)
        expected: dict[str, dict[str, Any]] = {}
        for i in range(4):
            rid = f"whole-{i}"
            answer = client.chat.completions.create(
                model=MODEL,
                messages=MESSAGES,
                max_tokens=5 + i,
                extra_headers={"x-request-id": rid},
            )
            assert answer.usage is not None
            expected[rid] = {
                "in": answer.usage.prompt_tokens,
                "out": answer.usage.completion_tokens,
            }
        prompt = expected["whole-0"]["in"]
        for i in range(4):
            rid = f"plain-stream-{i}"
            events = stream_lines(gateway, rid, {"max_tokens": 6 + i}, headers={})
            assert all("usage" not in e for e in events), (
                "the usage chunk the client did not ask for"
            )
            expected[rid] = {"in": prompt, "out": 6 + i}
        for i in range(4):
            rid = f"usage-stream-{i}"
            body = {"max_tokens": 7 + i, "stream_options": {"include_usage": True}}
            events = stream_lines(gateway, rid, body, headers={})
            usage = events[-1]["usage"]
            expected[rid] = {"in": usage["prompt_tokens"], "out": usage["completion_tokens"]}
        cut: dict[str, str] = {}
        for i in range(3):
            rid = f"cut-{i}"
            events = stream_lines(
                gateway, rid, {"max_tokens": 200}, headers={"x-sim-itl-ms": "20"}, keep=4 + i
            )
            cut[rid] = text_of(events)
        # Last: failures mid-stream count against the replica's circuit breaker (routing).
        partial: dict[str, str] = {}
        for i in range(3):
            rid = f"failed-{i}"
            events = stream_lines(
                gateway, rid, {"max_tokens": 50}, headers={"x-sim-fail-after": str(3 + i)}
            )
            partial[rid] = text_of(events)
        total = len(expected) + len(partial) + len(cut)
        rows = wait_for_rows(tmp_path / "ledger.db", total)  # written while the gateway runs
    assert len(ledger_rows(tmp_path / "ledger.db")) == total == len(rows)
    for rid, want in expected.items():
        row = rows[rid]
        assert (row["input_tokens"], row["output_tokens"]) == (want["in"], want["out"]), rid
        assert row["status"] == 200 and not row["partial"] and row["model"] == MODEL
        assert row["pool"] == "sim" and row["duration_ms"] > 0
    for rid, delivered in partial.items():
        row = rows[rid]
        assert row["partial"] and row["status"] == 200
        assert row["output_tokens"] == len(cl100k.encode_ordinary(delivered)) > 0
        assert row["input_tokens"] > 0 and row["ttft_ms"] is not None
    for rid, received in cut.items():
        row = rows[rid]
        assert row["partial"] and row["status"] == 499, str(row)
        # The gateway may have relayed a few more tokens than the client read before leaving.
        assert len(cl100k.encode_ordinary(received)) <= row["output_tokens"] < 200


def test_sigterm_mid_load_loses_no_row(sim: SimProcess, tmp_path: Path) -> None:
    # Rows stay buffered (a long interval, a big batch) until the shutdown flush writes them.
    cfg = config(sim, tmp_path, ledger_interval=600, ledger_batch_size=100_000)
    cfg["server"]["graceful_shutdown_seconds"] = 20
    with start_gateway(cfg, tmp_path) as gateway:
        outcomes: list[str] = []

        def one(i: int) -> None:
            try:
                stream_lines(
                    gateway, f"load-{i}", {"max_tokens": 40}, headers={"x-sim-itl-ms": "15"}
                )
                outcomes.append("done")
            except httpx.HTTPError:
                outcomes.append("refused")

        threads = [threading.Thread(target=one, args=(i,)) for i in range(40)]
        for n, thread in enumerate(threads):
            thread.start()
            if n == 25:
                sim.wait_for_requests(20)
                gateway.proc.send_signal(signal.SIGTERM)
        for thread in threads:
            thread.join(30)
        assert gateway.proc.wait(30) in (0, -signal.SIGTERM)
    forwarded = {r["request_id"] for r in sim.requests()}  # the gateway's ids, sent upstream
    rows = ledger_rows(tmp_path / "ledger.db")
    assert len(forwarded) >= 20 and "done" in outcomes
    assert sorted(r["request_id"] for r in rows) == sorted(forwarded)
