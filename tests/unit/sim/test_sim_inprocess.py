"""``create_sim_app(settings)`` serves in-process on a real uvicorn server too."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator

import httpx
import pytest
import uvicorn

from serve_app.sim import SimSettings, create_sim_app


@pytest.fixture
async def in_process_url() -> AsyncIterator[str]:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    app = create_sim_app(SimSettings(models=("m1",), no_delay=True, max_records=3))
    server = uvicorn.Server(uvicorn.Config(app, lifespan="on", log_level="warning"))
    task = asyncio.create_task(server.serve(sockets=[sock]))
    while not server.started:
        assert not task.done(), "the in-process server stopped while starting"
        await asyncio.sleep(0.01)
    yield f"http://127.0.0.1:{sock.getsockname()[1]}"
    server.should_exit = True
    await task
    sock.close()


async def test_factory_app_answers_and_keeps_a_bounded_record(in_process_url: str) -> None:
    async with httpx.AsyncClient(base_url=in_process_url) as h:
        for i in range(5):
            r = await h.post("/v1/completions", json={"model": "m1", "prompt": f"p{i}"})
            assert r.status_code == 200
        records = (await h.get("/sim/requests")).json()
    # max_records=3: only the last three stay.
    assert [r["body"]["prompt"] for r in records] == ["p2", "p3", "p4"]
    assert [r["seq"] for r in records] == [3, 4, 5]


async def test_non_number_steering_header_is_400(in_process_url: str) -> None:
    async with httpx.AsyncClient(base_url=in_process_url) as h:
        r = await h.post("/v1/completions", json={"prompt": "x"}, headers={"x-sim-itl-ms": "no"})
    assert r.status_code == 400
    assert "x-sim-itl-ms" in r.json()["error"]["message"]


async def test_stream_options_without_stream_is_400_like_vllm(in_process_url: str) -> None:
    body = {"prompt": "x", "stream_options": {"include_usage": True}}
    async with httpx.AsyncClient(base_url=in_process_url) as h:
        r = await h.post("/v1/completions", json=body)
    assert r.status_code == 400
    assert r.json()["error"]["param"] == "stream_options"


async def test_fail_rate_answers_that_share_with_the_fail_status_on_an_even_schedule() -> None:
    app = create_sim_app(SimSettings(models=("m1",), no_delay=True, fail_rate=0.8))
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://sim") as h:
        statuses = [
            (await h.post("/v1/completions", json={"model": "m1", "prompt": "p"})).status_code
            for _ in range(10)
        ]
        assert (await h.get("/health")).status_code == 200  # health checks keep passing
    assert statuses == [200, 500, 500, 500, 500] * 2
