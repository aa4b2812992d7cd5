"""Through a real gateway process with the openai SDK: a limit reached is openai.RateLimitError
with OpenAI's headers and body. That requests pass again after the advertised wait is checked on
the app's clock, in tests/seam/test_limits_clock.py."""

from __future__ import annotations

import time
from pathlib import Path

import openai
import pytest

from tests.gatewayproc import start_gateway
from tests.integration.limits.limitsetup import MODEL, limited_config, no_delay_sim

QUOTA_HEADERS = [
    "x-ratelimit-limit-requests",
    "x-ratelimit-remaining-requests",
    "x-ratelimit-reset-requests",
    "x-ratelimit-limit-tokens",
    "x-ratelimit-remaining-tokens",
    "x-ratelimit-reset-tokens",
]


def chat(client: openai.OpenAI, max_tokens: int) -> openai.APIResponse:  # type: ignore[type-arg]
    return client.chat.completions.with_raw_response.create(
        model=MODEL,
        messages=[{"role": "user", "content": "hello there"}],
        max_tokens=max_tokens,
        extra_body={"ignore_eos": True},  # vLLM's: the simulator's answer fills the cap
    )


def test_requests_per_minute(tmp_path: Path) -> None:
    limits = {"defaults": {"requests_per_minute": 120, "tokens_per_minute": 10_000_000}}
    with (
        no_delay_sim() as sim,
        start_gateway(limited_config(sim.url, tmp_path, limits=limits), tmp_path) as gateway,
    ):
        client = openai.OpenAI(base_url=gateway.base_url, api_key="unused", max_retries=0)
        started = time.monotonic()
        first = chat(client, 5)
        assert all(h in first.headers for h in QUOTA_HEADERS)
        assert first.headers["x-ratelimit-limit-requests"] == "120"
        assert first.headers["x-ratelimit-remaining-requests"] == "119"
        admitted = 1
        with pytest.raises(openai.RateLimitError) as refused:
            while admitted < 1000:
                chat(client, 5)
                admitted += 1
        # 120 at once, then 2 a second refill while the loop ran: never more.
        assert 120 <= admitted <= 120 + 2 * (time.monotonic() - started)
        err = refused.value
        assert err.code == "rate_limit_exceeded"
        assert err.type == "requests"
        assert "requests per minute" in err.message and "Limit 120" in err.message
        headers = err.response.headers
        assert all(h in headers for h in QUOTA_HEADERS)
        assert headers["x-ratelimit-remaining-requests"] == "0"
        assert 0 < int(headers["retry-after-ms"]) <= 500  # one request refills in 0.5 s
        assert headers["retry-after"] == "1"
        # That waiting what retry-after-ms says is enough: tests/seam/test_limits_clock.py.


def test_tokens_per_minute(tmp_path: Path) -> None:
    # 1000 tokens a second: two reservations of 21k fit; the third waits about 3 s for 3k more.
    limits = {"defaults": {"tokens_per_minute": 60_000}}
    with (
        no_delay_sim() as sim,
        start_gateway(limited_config(sim.url, tmp_path, limits=limits), tmp_path) as gateway,
    ):
        client = openai.OpenAI(base_url=gateway.base_url, api_key="unused", max_retries=0)
        first = chat(client, 21_000)
        assert first.headers["x-ratelimit-limit-tokens"] == "60000"
        assert "x-ratelimit-limit-requests" not in first.headers  # no requests limit set
        chat(client, 21_000)
        with pytest.raises(openai.RateLimitError) as refused:
            chat(client, 21_000)
        err = refused.value
        assert err.type == "tokens" and "tokens per minute" in err.message
        assert "Limit 60000" in err.message and "Requested 210" in err.message
        assert 0 < int(err.response.headers["retry-after-ms"]) <= 4000


def test_request_larger_than_the_limit_is_refused_without_retry_hint(tmp_path: Path) -> None:
    limits = {"defaults": {"tokens_per_minute": 1000}}
    with (
        no_delay_sim() as sim,
        start_gateway(limited_config(sim.url, tmp_path, limits=limits), tmp_path) as gateway,
    ):
        client = openai.OpenAI(base_url=gateway.base_url, api_key="unused", max_retries=0)
        with pytest.raises(openai.RateLimitError) as refused:
            chat(client, 5000)
        assert "Request too large" in refused.value.message
        assert "retry-after" not in refused.value.response.headers
        assert sim.requests() == []  # refused before forwarding
