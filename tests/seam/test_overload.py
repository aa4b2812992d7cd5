"""The server's caps in the app: a request over them is refused by the one error tree, counted
in ``gateway_overload_refusals_total`` and access-logged, with the request's ids."""

from __future__ import annotations

import asyncio
from pathlib import Path

import orjson
import pytest

from tests.seam.harness import running_gateway
from tests.seam.upstream import Script

CHAT = "/v1/chat/completions"
SCRIPTS = {"default": Script(), "held": Script(chunks=400, gap=0.01)}


def chat(script: str, **extra: object) -> bytes:
    body = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "script": script}
    return orjson.dumps({**body, **extra})


async def test_a_request_past_the_in_flight_cap_is_refused_counted_and_logged(
    tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    server = {"access_log": True, "max_requests_in_flight": 1}
    async with running_gateway(tmp_path, SCRIPTS, server=server) as gw:
        held = asyncio.create_task(gw.call(CHAT, chat("held", stream=True)))
        for _ in range(2000):  # until the held request is past the cap (it reached upstream)
            if any(upstream.sent for upstream in gw.upstreams):
                break
            await asyncio.sleep(0.005)
        refused = await gw.call(CHAT, chat("default"))
        held.cancel()
        refusals = gw.state.metrics.registry.get_sample_value(
            "gateway_overload_refusals_total", {"reason": "in_flight"}
        )
    assert refused.status == 503 and refused.headers[b"retry-after"] == b"1"
    assert refused.json()["error"] == {
        "message": "The gateway is serving too many requests; retry shortly.",
        "type": "server_error",
        "param": None,
        "code": "server_overloaded",
    }
    request_id = refused.headers[b"x-gateway-request-id"].decode()
    assert refusals == 1.0
    lines = [orjson.loads(line) for line in capfd.readouterr().err.splitlines() if "{" in line]
    (logged,) = [e for e in lines if e.get("request_id") == request_id]
    assert (logged["status"], logged["error_code"]) == (503, "server_overloaded")
