"""Every exit of the pipeline, through the app factory's seam: one outcome, one settlement and
one ledger row per admitted request, nothing held afterwards, and the billing rules."""

from __future__ import annotations

import gc
from pathlib import Path
from typing import Any

import orjson
import pytest

from gateway.wire.outcome import Arrival, Ending, Outcome
from gateway.wire.usage import UsageSource
from tests.seam.harness import Gateway, running_gateway
from tests.seam.upstream import Script

CHAT = "/v1/chat/completions"
SCRIPTS = {
    "default": Script(),
    "whole": Script(kind="whole"),
    "slow": Script(chunks=50, gap=0.005),
    "reset": Script(chunks=5, fail_after=2),
    "stall": Script(chunks=5, fail_after=1, failure="stall"),
    "down": Script(kind="connect_error"),
    "late": Script(kind="timeout"),
    "e500": Script(kind="status", status=500),
    "e400": Script(kind="status", status=400),
    "unended": Script(chunks=2, unended=3 << 20),  # 3 MiB of one event that never ends
}


def chat(script: str = "default", **extra: Any) -> bytes:
    body = {"model": "m", "messages": [{"role": "user", "content": "hello there"}]}
    return orjson.dumps({**body, "script": script, **extra})


def settled_once(gw: Gateway) -> None:
    """Every admitted request settled exactly once, and no slot is held."""
    admitted = [o for o in gw.outcomes if o.admitted]
    assert all(gw.limiter.settled[o.arrival.request_id] == 1 for o in admitted)
    assert sum(gw.limiter.settled.values()) == len(admitted)
    assert gw.limiter.in_flight() == 0


async def test_a_complete_stream_bills_the_upstream_usage(tmp_path: Path) -> None:
    async with running_gateway(tmp_path, SCRIPTS) as gw:
        reply = await gw.call(CHAT, chat(stream=True))
        assert reply.status == 200 and b"[DONE]" in reply.body
        assert b'"usage"' not in reply.body  # asked for on the client's behalf, stripped again
        outcome = reply.outcome
        assert outcome is not None and outcome.ending is Ending.COMPLETE
        assert outcome.usage.source is UsageSource.UPSTREAM
        assert (outcome.usage.input_tokens, outcome.usage.output_tokens) == (11, 3)
        settled_once(gw)
    (row,) = gw.ledger_rows()
    assert (row["input_tokens"], row["output_tokens"], row["status"]) == (11, 3, 200)
    assert row["request_id"] == outcome.arrival.request_id


async def test_a_finished_request_is_freed_without_the_garbage_collector(tmp_path: Path) -> None:
    """No reference cycle per served request: the collector would find one every few thousand
    requests, a pause of about 10 ms each (README, Performance). (A client that leaves mid-way
    does leave one, through the cancellation's traceback: asyncio's, and rare.)"""
    async with running_gateway(tmp_path, SCRIPTS) as gw:
        await gw.call(CHAT, chat(stream=True))  # first-request caches filled
        gc.collect()
        gc.disable()
        try:
            before = {id(o) for o in _values()}  # other tests' (a whole session runs here)
            for body in (chat(), chat(stream=True), chat("whole"), chat("e400")):
                await gw.call(CHAT, body)
            gw.outcomes.clear()  # the harness's own references
            left = [o for o in _values() if id(o) not in before]
        finally:
            gc.enable()
        assert left == []


def _values() -> list[object]:
    """Every request's arrival and outcome alive; by exact type, which asks no object's
    ``__class__`` (some libraries' lazy module proxies warn when asked)."""
    return [o for o in gc.get_objects() if type(o) in (Outcome, Arrival)]


async def test_leaving_right_after_the_first_chunk_still_pays_the_prompt(tmp_path: Path) -> None:
    """The dodge of issue 11: close after the first chunk (sent once prefill is done)."""
    async with running_gateway(tmp_path, SCRIPTS) as gw:
        reply = await gw.call(CHAT, chat("slow", stream=True), leave_after=1)
        outcome = reply.outcome
        assert outcome is not None and outcome.ending is Ending.CLIENT_GONE
        assert outcome.usage.source is UsageSource.COUNTED and outcome.usage.partial
        assert outcome.prompt_tokens is not None and outcome.prompt_tokens > 0
        assert outcome.usage.input_tokens == outcome.prompt_tokens
        settled_once(gw)
    (row,) = gw.ledger_rows()
    assert row["status"] == 499 and row["input_tokens"] == outcome.prompt_tokens
    assert row["partial"]


async def test_a_stream_broken_mid_way_ends_with_an_error_event_and_is_counted(
    tmp_path: Path,
) -> None:
    async with running_gateway(tmp_path, SCRIPTS) as gw:
        for script in ("reset", "stall"):
            reply = await gw.call(CHAT, chat(script, stream=True))
            assert reply.status == 200 and b'"error"' in reply.body
            outcome = reply.outcome
            assert outcome is not None and outcome.ending is Ending.UPSTREAM_FAILED
            assert outcome.usage.source is UsageSource.COUNTED and outcome.usage.partial
            assert outcome.usage.output_tokens >= 1
        settled_once(gw)
    assert len(gw.ledger_rows()) == 2


async def test_an_upstream_event_that_never_ends_is_cut_at_the_bound(tmp_path: Path) -> None:
    async with running_gateway(tmp_path, SCRIPTS) as gw:
        for extra in ({}, {"stream_options": {"include_usage": True}}):
            reply = await gw.call(CHAT, chat("unended", stream=True, **extra))
            assert reply.status == 200 and len(reply.body) < (1 << 20) + (1 << 17)  # cut at 1 MiB
            last = reply.body.rstrip(b"\n").rsplit(b"\n\n", 1)[-1]
            error = orjson.loads(last.removeprefix(b"data: "))["error"]
            assert error["code"] == "upstream_event_too_large"
            outcome = reply.outcome
            assert outcome is not None and outcome.ending is Ending.UPSTREAM_FAILED
            assert outcome.error_code == "upstream_event_too_large"
            assert outcome.usage.output_tokens >= 2 and outcome.usage.partial
        settled_once(gw)
    assert len(gw.ledger_rows()) == 2


@pytest.mark.parametrize(
    ("script", "status"), [("down", 502), ("late", 504), ("e500", 500), ("e400", 400)]
)
async def test_upstream_failures_before_the_answer_charge_nothing(
    tmp_path: Path, script: str, status: int
) -> None:
    async with running_gateway(tmp_path, SCRIPTS) as gw:
        reply = await gw.call(CHAT, chat(script))
        assert reply.status == status
        assert isinstance(reply.json()["error"], dict)
        outcome = reply.outcome
        assert outcome is not None and outcome.admitted
        assert outcome.usage.source is UsageSource.NONE and outcome.usage.total == 0
        assert outcome.client_caused == (status == 400)
        settled_once(gw)
    (row,) = gw.ledger_rows()
    assert row["status"] == status and row["input_tokens"] == 0


async def test_refusals_before_admission_leave_no_row_and_hold_nothing(tmp_path: Path) -> None:
    deep: object = "x"
    for _ in range(300):
        deep = [deep]
    import json

    bodies = [
        (b"{not json", 400),
        (orjson.dumps({"model": "nope", "messages": [{"role": "user", "content": "x"}]}), 404),
        (json.dumps({"model": "m", "stream": True, "messages": [], "deep": deep}).encode(), 400),
        (json.dumps({"model": "m", "stream": True, "messages": [1], "deep": deep}).encode(), 400),
    ]
    async with running_gateway(tmp_path, SCRIPTS) as gw:
        for body, status in bodies:
            reply = await gw.call(CHAT, body)
            assert reply.status == status, reply.body
            assert reply.outcome is not None and not reply.outcome.admitted
            assert b"x-request-id" in reply.headers
        settled_once(gw)
    assert gw.ledger_rows() == []
    assert gw.upstreams[0].sent == []


async def test_the_client_request_id_is_a_correlation_id_never_the_identity(
    tmp_path: Path,
) -> None:
    async with running_gateway(
        tmp_path, SCRIPTS, limits={"defaults": {"concurrent_requests": 1}}
    ) as gw:
        same = ((b"x-request-id", b"shared-id"),)
        first = await gw.call(CHAT, chat("slow", stream=True), headers=same, leave_after=1)
        second = await gw.call(CHAT, chat(stream=True), headers=same)
        assert second.status == 200
        assert first.headers[b"x-request-id"] == b"shared-id"
        gateway_ids = {o.arrival.request_id for o in gw.outcomes}
        assert len(gateway_ids) == 2 and "shared-id" not in gateway_ids
        sent = gw.upstreams[0].sent
        assert {s["headers"][b"x-client-request-id"] for s in sent} == {b"shared-id"}
        assert {s["headers"][b"x-request-id"].decode() for s in sent} == gateway_ids
        settled_once(gw)


async def test_reservations_cover_every_choice_and_the_vllm_cap(tmp_path: Path) -> None:
    async with running_gateway(
        tmp_path,
        SCRIPTS,
        limits={"defaults": {"tokens_per_minute": 1000}},
        models={"m": {"pool": "pd", "default_max_tokens": 300}},
    ) as gw:
        too_many = await gw.call(CHAT, chat(n=4, max_tokens=10, max_completion_tokens=400))
        assert too_many.status == 429  # 4 x 400 > 1000: max_completion_tokens wins, times n
        default_cap = await gw.call(CHAT, chat(n=4))  # 4 x the model's 300 > 1000
        assert default_cap.status == 429
        fits = await gw.call(CHAT, chat(n=2))  # 2 x 300 + the prompt < 1000
        assert fits.status == 200
        settled_once(gw)


async def test_upstream_error_answers_are_put_in_the_openai_envelope(tmp_path: Path) -> None:
    async with running_gateway(tmp_path, SCRIPTS) as gw:
        server_error = (await gw.call(CHAT, chat("e500"))).json()["error"]
        assert server_error["message"] == "The upstream answered with status 500."
        assert server_error["type"] == "server_error"
        client_error = (await gw.call(CHAT, chat("e400"))).json()["error"]
        assert client_error["message"] == "upstream said no"  # a 4xx keeps its message
        assert client_error["code"] is None or isinstance(client_error["code"], str)
