"""The pipeline driven with no HTTP at all: a request value in, a collecting sink out.

What a batch job's line (issue 39) does: no scope, no ``receive``, no ``send``; the app built by
``create_app`` (its pipeline on ``app.state.pipeline``), the scripted upstream at the seam. The
answer, the one outcome, the one settlement and the one ledger row are the same as over ASGI."""

from __future__ import annotations

import asyncio
from pathlib import Path

import orjson

from gateway.proxy.incoming import Incoming
from gateway.proxy.pipeline import Pipeline
from gateway.proxy.sink import Header
from gateway.wire.outcome import Ending, arrival_now
from gateway.wire.request import Operation
from tests.seam.harness import running_gateway
from tests.seam.test_exit_paths import CHAT, SCRIPTS, chat, settled_once


class CollectingSink:
    """Keeps the answer; its receiver leaves once it got ``leave_after`` chunks (None: never)."""

    def __init__(self, leave_after: int | None = None) -> None:
        self.status = 0
        self.headers: list[Header] = []
        self.chunks: list[bytes] = []
        self.ended = False
        self.leave_after = leave_after
        self.gone = asyncio.Event()

    async def start(self, status: int, headers: list[Header]) -> None:
        assert self.status == 0, "started twice"
        self.status, self.headers = status, headers

    async def send(self, chunk: bytes) -> None:
        assert self.status and not self.ended
        if not self.gone.is_set():
            self.chunks.append(chunk)
        if self.leave_after is not None and len(self.chunks) >= self.leave_after:
            self.gone.set()

    async def end(self, chunk: bytes = b"") -> None:
        await self.send(chunk)
        self.ended = True

    async def departed(self) -> None:
        await self.gone.wait()

    @property
    def body(self) -> bytes:
        return b"".join(self.chunks)


def line(body: bytes, operation: Operation = Operation.CHAT) -> Incoming:
    """A request as a batch job's line makes it: no headers, no client address."""
    return Incoming(operation, arrival_now(None), None, body, path=CHAT)


async def test_a_stream_served_without_a_scope_is_answered_settled_and_recorded(
    tmp_path: Path,
) -> None:
    async with running_gateway(tmp_path, SCRIPTS) as gw:
        pipeline: Pipeline = gw.app.state.pipeline
        over_http = await gw.call(CHAT, chat(stream=True))
        sink = CollectingSink()
        outcome = await pipeline.serve(line(chat(stream=True)), sink)
        assert sink.status == 200 and sink.ended
        assert sink.body == over_http.body  # the same bytes as over ASGI
        assert b"[DONE]" in sink.body and b'"usage"' not in sink.body
        assert outcome.ending is Ending.COMPLETE and outcome.admitted
        assert (outcome.usage.input_tokens, outcome.usage.output_tokens) == (11, 3)
        gw.outcomes.append(outcome)
        settled_once(gw)
        assert gw.limiter.settled[outcome.arrival.request_id] == 1
    rows = [r for r in gw.ledger_rows() if r["request_id"] == outcome.arrival.request_id]
    assert [(r["input_tokens"], r["output_tokens"], r["status"]) for r in rows] == [(11, 3, 200)]


async def test_a_whole_body_over_the_limit_is_refused_before_admission(tmp_path: Path) -> None:
    """A line is as hostile as an HTTP body: bounded by ``max_body_bytes`` too."""
    server = {"access_log": False, "max_body_bytes": 1024}
    async with running_gateway(tmp_path, SCRIPTS, server=server) as gw:
        sink = CollectingSink()
        big = chat(padding="x" * 2000)
        outcome = await gw.app.state.pipeline.serve(line(big), sink)
        assert sink.status == 413 and sink.ended
        assert orjson.loads(sink.body)["error"]["code"] == "request_too_large"
        assert outcome.ending is Ending.REFUSED and not outcome.admitted
        assert sum(gw.limiter.settled.values()) == 0
    assert gw.ledger_rows() == []


async def test_a_receiver_that_leaves_mid_stream_cancels_the_upstream(tmp_path: Path) -> None:
    async with running_gateway(tmp_path, SCRIPTS) as gw:
        sink = CollectingSink(leave_after=2)
        outcome = await gw.app.state.pipeline.serve(line(chat("slow", stream=True)), sink)
        assert outcome.ending is Ending.CLIENT_GONE
        assert len(sink.chunks) == 2  # nothing more was produced for it after it left
        gw.outcomes.append(outcome)
        settled_once(gw)
    (row,) = gw.ledger_rows()
    assert row["request_id"] == outcome.arrival.request_id
