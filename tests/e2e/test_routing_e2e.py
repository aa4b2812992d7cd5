"""Prompt-length routing end to end on CPU: one gateway model over the local stack's two apps.

The gateway counts prompt tokens with the tiny model's own ``tokenizer.json``; a long prompt
goes to the PD app, and decode's log proves it pulled the prompt's KV from prefill; a short one
goes to the colocated app, and decode never saw it.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import openai
import pytest

from serve_app.doctor import kv_evidence, replica_logs, unique_prompt, wait_for_kv_evidence
from serve_app.local import LocalState
from tests.e2e.conftest import STACK_TIMEOUT
from tests.gatewayproc import GatewayProcess, start_gateway

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(STACK_TIMEOUT + 300)]

ROUTED = "tiny-routed"
THRESHOLD = 48  # unique_prompt() is well over it; a greeting well under
MAX_TOKENS = 16


def routed_config(stack: LocalState) -> dict[str, Any]:
    state_dir = Path(stack.driver_log).parent
    return {
        "auth": {"enabled": False},
        "pools": {name: {"urls": [url]} for name, url in stack.base_urls.items()},
        "models": {
            ROUTED: {
                "variants": {
                    "stable": {"weight": 1, "pools": {"pd": "pd", "colocated": "colocated"}}
                },
                "upstream_model": stack.model,
                "routing": {"pd_threshold_tokens": THRESHOLD},
                "tokenizer": {
                    "kind": "huggingface",
                    "tokenizer_file": str(state_dir / "tiny-model" / "tokenizer.json"),
                },
            }
        },
    }


@pytest.fixture(scope="module")
def routed_gateway(
    local_stack: LocalState, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[GatewayProcess]:
    with start_gateway(routed_config(local_stack), tmp_path_factory.mktemp("routed")) as gw:
        yield gw


def stream_chat(gateway: GatewayProcess, prompt: str) -> tuple[dict[str, str], str, int]:
    """(response headers, completion id, upstream prompt tokens) of one greedy streamed chat."""
    client = openai.OpenAI(base_url=gateway.base_url, api_key="unused", timeout=120, max_retries=0)
    with client.chat.completions.with_streaming_response.create(
        model=ROUTED,
        messages=[{"role": "user", "content": prompt}],
        max_tokens=MAX_TOKENS,
        temperature=0,
        stream=True,
        stream_options={"include_usage": True},
    ) as response:
        headers = dict(response.headers)
        chunks = list(response.parse())
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    usage = chunks[-1].usage
    assert usage is not None
    return headers, chunks[0].id, usage.prompt_tokens


def decode_logs(stack: LocalState) -> list[Path]:
    assert stack.session_dir is not None
    logs = replica_logs(Path(stack.session_dir) / "logs", "pd", "Decode")
    assert logs, "no log of the PD app's Decode replica"
    return logs


def test_long_prompt_is_served_by_pd_with_kv_transfer(
    local_stack: LocalState, routed_gateway: GatewayProcess
) -> None:
    headers, completion_id, prompt_tokens = stream_chat(routed_gateway, unique_prompt())
    assert headers["x-gateway-pool"] == "pd"
    assert headers["x-gateway-route-reason"] == "prompt_long"
    evidence = wait_for_kv_evidence(decode_logs(local_stack), completion_id)
    assert evidence.moved, evidence
    assert evidence.num_external_tokens == prompt_tokens
    # the gateway's count (chat template measured from the model's files) is vLLM's own
    assert counted_by_gateway(routed_gateway, headers) == prompt_tokens


def test_short_prompt_is_served_by_colocated(
    local_stack: LocalState, routed_gateway: GatewayProcess
) -> None:
    headers, completion_id, prompt_tokens = stream_chat(routed_gateway, "Hi!")
    assert headers["x-gateway-pool"] == "colocated"
    assert headers["x-gateway-route-reason"] == "prompt_short"
    assert prompt_tokens < THRESHOLD
    assert not kv_evidence(decode_logs(local_stack), completion_id).lines  # decode never saw it
    assert counted_by_gateway(routed_gateway, headers) == prompt_tokens


def counted_by_gateway(gateway: GatewayProcess, headers: dict[str, str]) -> int:
    """The prompt tokens the gateway counted for the request, from its access log (written as
    the response ends, so it may trail the last chunk by a moment)."""
    deadline = time.monotonic() + 10
    while True:
        entries = [
            e for e in gateway.access_log() if e["request_id"] == headers["x-gateway-request-id"]
        ]
        if entries or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    assert len(entries) == 1
    counted: int = entries[0]["prompt_tokens"]
    return counted
