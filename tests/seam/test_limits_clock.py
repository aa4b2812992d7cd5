"""The limits' windows refill on the app's clock: a refused client that waits what
``retry-after-ms`` says is admitted, and one that comes back a millisecond early is not. The
real-SDK test (tests/integration/limits/test_rate_limit_sdk.py) checks the headers and the
refusal; the waiting is here, where time moves only when the test advances it."""

from __future__ import annotations

from pathlib import Path

from tests.seam.harness import Gateway, Reply, running_gateway
from tests.seam.test_exit_paths import CHAT, chat
from tests.seam.upstream import Script

SCRIPTS = {"default": Script(kind="whole")}


def limits(**defaults: int) -> dict[str, object]:
    return {"limits": {"defaults": {"concurrent_requests": 10_000, **defaults}}}


async def refused_after(gw: Gateway, admitted: int, max_tokens: int) -> Reply:
    """Make ``admitted`` requests that must pass, then the one that must not."""
    for _ in range(admitted):
        assert (await gw.call(CHAT, chat(max_tokens=max_tokens))).status == 200
    refused = await gw.call(CHAT, chat(max_tokens=max_tokens))
    assert refused.status == 429, refused.body
    return refused


def wait_ms(refused: Reply) -> int:
    return int(refused.headers[b"retry-after-ms"])


async def test_a_requests_window_refills_after_the_advertised_wait(tmp_path: Path) -> None:
    overrides = limits(requests_per_minute=120, tokens_per_minute=10**9)
    async with running_gateway(tmp_path, SCRIPTS, **overrides) as gw:
        refused = await refused_after(gw, 120, max_tokens=5)  # 120 at once, then 2 a second
        assert refused.json()["error"]["type"] == "requests"
        assert wait_ms(refused) == 500
        gw.clock.advance((wait_ms(refused) - 1) / 1000)
        assert (await gw.call(CHAT, chat(max_tokens=5))).status == 429
        gw.clock.advance(0.001)
        assert (await gw.call(CHAT, chat(max_tokens=5))).status == 200
        assert (await gw.call(CHAT, chat(max_tokens=5))).status == 429  # one request's worth


async def test_a_tokens_window_refills_after_the_advertised_wait(tmp_path: Path) -> None:
    # 10 tokens a second. Each request reserves its 500 output tokens plus the prompt's and is
    # charged what it used (a few): it is refused once what was used leaves less than 500 free.
    async with running_gateway(tmp_path, SCRIPTS, **limits(tokens_per_minute=600)) as gw:
        admitted = 0
        while (refused := await gw.call(CHAT, chat(max_tokens=500))).status == 200:
            admitted += 1
            assert admitted < 50, "the tokens used were never charged"
        assert refused.status == 429
        assert refused.json()["error"]["type"] == "tokens"
        assert 0 < wait_ms(refused) <= 6000
        gw.clock.advance((wait_ms(refused) - 1) / 1000)
        assert (await gw.call(CHAT, chat(max_tokens=500))).status == 429
        gw.clock.advance(0.001)
        assert (await gw.call(CHAT, chat(max_tokens=500))).status == 200
