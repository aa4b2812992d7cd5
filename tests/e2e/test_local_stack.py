"""End to end on CPU, real processes: the openai SDK -> the gateway -> Ray Serve LLM -> vLLM.

The PD app's answers prove nothing about disaggregation by themselves (a decode engine that
recomputed the prompt answers the same), so every PD request is checked against decode's own
log: it pulled the prompt's KV blocks from prefill over NIXL.
"""

from __future__ import annotations

import re
import subprocess
import sys
import urllib.request
from pathlib import Path

import openai
import pytest

from serve_app.doctor import KVEvidence, replica_logs, unique_prompt, wait_for_kv_evidence
from serve_app.local import LocalState
from tests.conformance.httpx_check import checked_openai
from tests.conformance.openapi_check import VLLM_NULLS
from tests.e2e.conftest import STACK_TIMEOUT
from tests.e2e.stack import launcher_of
from tests.gatewayproc import GatewayProcess

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(STACK_TIMEOUT + 300)]

MAX_TOKENS = 16
# Which gateway model name reaches which pool (see conftest.gateway_config).
POOLS = {"pd": "tiny-pd", "colocated": "tiny-colocated"}
# `local up`'s progress lines: "[  97.4s] deployment ready: pd/Prefill:tiny (1 replica(s))".
PHASE_LINE = re.compile(r"^\[\s*(\d+\.\d)s\] ")


def client(gateway: GatewayProcess) -> openai.OpenAI:
    # Every whole answer checked against OpenAI's document (tests/conformance), but for the nulls
    # vLLM sends where the document has none (named in VLLM_NULLS, relayed untouched).
    return checked_openai(gateway.base_url, VLLM_NULLS, timeout=120)


def decode_evidence(stack: LocalState, completion_id: str) -> KVEvidence:
    assert stack.session_dir is not None
    decode_logs = replica_logs(Path(stack.session_dir) / "logs", "pd", "Decode")
    assert decode_logs, "no log of the PD app's Decode replica"
    return wait_for_kv_evidence(decode_logs, completion_id)


@pytest.mark.parametrize("pool", sorted(POOLS))
def test_models_answer_under_each_apps_prefix(local_stack: LocalState, pool: str) -> None:
    url = local_stack.base_urls[pool] + "/v1/models"
    with urllib.request.urlopen(url, timeout=30) as response:
        assert response.status == 200
        assert b'"id":"tiny"' in response.read()


def test_gateway_lists_one_model_per_pool(stack_gateway: GatewayProcess) -> None:
    listed = {model.id for model in client(stack_gateway).models.list()}
    assert set(POOLS.values()) <= listed


@pytest.mark.parametrize("pool", sorted(POOLS))
def test_streamed_chat_completion_through_the_gateway(
    local_stack: LocalState, stack_gateway: GatewayProcess, pool: str
) -> None:
    stream = client(stack_gateway).chat.completions.create(
        model=POOLS[pool],
        messages=[{"role": "user", "content": unique_prompt()}],
        max_tokens=MAX_TOKENS,
        temperature=0,
        stream=True,
        stream_options={"include_usage": True},
    )
    chunks = list(stream)
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    usage = chunks[-1].usage
    assert text
    assert usage is not None and usage.prompt_tokens > 64
    assert 0 < usage.completion_tokens <= MAX_TOKENS
    assert {c.id for c in chunks} == {chunks[0].id}
    if pool == "pd":
        evidence = decode_evidence(local_stack, chunks[0].id)
        assert evidence.moved, evidence
        assert evidence.num_external_tokens == usage.prompt_tokens


@pytest.mark.parametrize("pool", sorted(POOLS))
def test_streamed_text_completion_through_the_gateway(
    local_stack: LocalState, stack_gateway: GatewayProcess, pool: str
) -> None:
    stream = client(stack_gateway).completions.create(
        model=POOLS[pool],
        prompt=unique_prompt(),
        max_tokens=MAX_TOKENS,
        temperature=0,
        stream=True,
        stream_options={"include_usage": True},
    )
    chunks = list(stream)
    text = "".join(c.choices[0].text for c in chunks if c.choices)
    usage = chunks[-1].usage
    assert text
    assert usage is not None and usage.prompt_tokens > 64
    assert 0 < usage.completion_tokens <= MAX_TOKENS
    if pool == "pd":
        evidence = decode_evidence(local_stack, chunks[0].id)
        assert evidence.moved, evidence
        assert evidence.num_external_tokens == usage.prompt_tokens


def test_greedy_answers_agree_between_the_pools(stack_gateway: GatewayProcess) -> None:
    """Same weights, same prompt, temperature 0: the KV that decode pulled from prefill is the
    KV it would have computed, so the disaggregated answer equals the colocated one."""
    prompt = unique_prompt()
    answers = {
        pool: client(stack_gateway)
        .chat.completions.create(
            model=model,
            messages=[{"role": "user", "content": prompt}],
            max_tokens=MAX_TOKENS,
            temperature=0,
        )
        .choices[0]
        .message.content
        for pool, model in POOLS.items()
    }
    assert answers["pd"] and answers["pd"] == answers["colocated"]


def test_doctor_proves_the_transfer_and_names_the_backend(local_stack: LocalState) -> None:
    state_dir = Path(local_stack.driver_log).parent
    result = subprocess.run(
        [sys.executable, "-m", "serve_app.cli", "doctor", "--state-dir", str(state_dir)],
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "KV moved prefill -> decode: YES" in result.stdout
    assert "prefill ['UCX'], decode ['UCX']" in result.stdout


def test_local_up_printed_a_timed_line_per_phase(
    local_stack: LocalState, request: pytest.FixtureRequest
) -> None:
    launcher = launcher_of(request.config)
    if launcher.reused:
        pytest.skip("a reused stack was started outside this run")
    lines = launcher.log_path.read_text(errors="replace").splitlines()
    phases = [line.split("] ", 1)[1] for line in lines if PHASE_LINE.match(line)]
    assert any(p.startswith("starting Ray") for p in phases), lines
    ready = [p.split(": ", 1)[1].split(" ")[0] for p in phases if p.startswith("deployment ready")]
    # Each engine deployment of both apps, each once, before the final ready line.
    assert len(ready) == len(set(ready)), ready
    for app, engine in [("pd", "Prefill"), ("pd", "Decode"), ("colocated", "LLMServer")]:
        assert any(r.startswith(f"{app}/") and engine in r for r in ready), (app, engine, ready)
    assert phases[-1] == "ready: pd, colocated"
    matches = [PHASE_LINE.match(line) for line in lines]
    seconds = [float(m[1]) for m in matches if m is not None]
    assert seconds == sorted(seconds)
