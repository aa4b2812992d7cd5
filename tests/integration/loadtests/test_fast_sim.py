"""The overhead benchmark's upstream (loadtests/fast_sim.py, a fixed-answer simulator on
granian) speaks the OpenAI wire format on both of granian's interfaces, paced or not, so the
proxies it measures relay real answers: checked with the official SDK."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import openai
import pytest

from tests.gatewayproc import free_port

FAST_SIM = Path(__file__).resolve().parents[3] / "loadtests" / "fast_sim.py"
CHUNKS = 5


@pytest.fixture(params=[("rsgi", 0), ("asgi", 0), ("rsgi", 1), ("asgi", 1)])
def fast_sim(request: pytest.FixtureRequest) -> Iterator[str]:
    """Both interfaces, each sending a stream at once and paced (a token every 1 ms)."""
    interface, pace_ms = request.param
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, str(FAST_SIM), "--port", str(port), "--chunks", str(CHUNKS),
         "--model", "m", "--interface", interface, "--pace-ms", str(pace_ms)],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    try:
        _wait_ready(url + "/health", proc)
        yield url + "/v1"
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def _wait_ready(url: str, proc: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        assert proc.poll() is None, "fast_sim exited"
        try:
            with urllib.request.urlopen(url, timeout=1):
                return
        except OSError:
            time.sleep(0.05)
    raise AssertionError("fast_sim did not start")


def test_whole_answer_with_usage(fast_sim: str) -> None:
    client = openai.OpenAI(base_url=fast_sim, api_key="none", max_retries=0)
    answer = client.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}])
    assert answer.choices[0].message.content == "".join(f" w{i}" for i in range(CHUNKS))
    assert answer.usage is not None and answer.usage.completion_tokens == CHUNKS


def test_stream_one_event_a_token_then_usage_when_asked(fast_sim: str) -> None:
    client = openai.OpenAI(base_url=fast_sim, api_key="none", max_retries=0)
    chunks = list(
        client.chat.completions.create(
            model="m",
            messages=[{"role": "user", "content": "hi"}],
            stream=True,
            stream_options={"include_usage": True},
        )
    )
    texts = [c.choices[0].delta.content for c in chunks if c.choices and c.choices[0].delta.content]
    assert texts == [f" w{i}" for i in range(CHUNKS)]
    assert chunks[-1].usage is not None and chunks[-1].usage.completion_tokens == CHUNKS
    plain = list(
        client.chat.completions.create(
            model="m", messages=[{"role": "user", "content": "hi"}], stream=True
        )
    )
    assert all(c.usage is None for c in plain)
