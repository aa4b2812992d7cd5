"""Random fault schedules through the whole pipeline (Hypothesis): whatever the upstream and the
client do, every admitted request has exactly one outcome, one settlement and one ledger row, no
slot stays held, and usage is never below the counted prompt once the upstream was reached."""

from __future__ import annotations

import asyncio
import tempfile
from pathlib import Path

import orjson
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gateway.wire.outcome import Ending
from gateway.wire.usage import UsageSource
from tests.seam.harness import running_gateway
from tests.seam.upstream import Script

scripts = st.one_of(
    st.builds(
        Script,
        kind=st.just("stream"),
        chunks=st.integers(0, 8),
        usage=st.booleans(),
        fail_after=st.one_of(st.none(), st.integers(0, 5)),
        failure=st.sampled_from(["reset", "stall"]),
        gap=st.sampled_from([0.0, 0.015]),  # slow enough for the disconnect watch (20 ms)
    ),
    st.builds(Script, kind=st.just("status"), status=st.sampled_from([400, 404, 429, 500, 503])),
    st.builds(Script, kind=st.sampled_from(["connect_error", "timeout"])),
)
bodies = st.sampled_from(["ok", "ok", "ok", "bad_json", "unknown_model", "no_messages"])


@st.composite
def requests(draw: st.DrawFn) -> tuple[Script, str, bool, int | None]:
    return (
        draw(scripts),
        draw(bodies),
        draw(st.booleans()),  # stream
        draw(st.one_of(st.none(), st.integers(0, 4))),  # client leaves after k body messages
    )


def body_for(kind: str, index: int, stream: bool) -> bytes:
    messages = [{"role": "user", "content": "tell me a story " * (index % 4 + 1)}]
    body = {"model": "m", "messages": messages, "stream": stream, "script": str(index)}
    if kind == "bad_json":
        return b'{"model": "m", "messages": ['
    if kind == "unknown_model":
        body["model"] = "nope"
    if kind == "no_messages":
        body["messages"] = []
    return orjson.dumps(body)


@settings(
    max_examples=60,
    deadline=None,
    derandomize=True,  # the same schedules every run: CI sees what a developer saw
    suppress_health_check=[HealthCheck.too_slow],
)
@given(st.lists(requests(), min_size=1, max_size=6))
def test_every_fault_schedule_settles_each_admitted_request_once(
    schedule: list[tuple[Script, str, bool, int | None]],
) -> None:
    asyncio.run(_run(schedule))


async def _run(schedule: list[tuple[Script, str, bool, int | None]]) -> None:
    table = {str(i): script for i, (script, _, _, _) in enumerate(schedule)}
    with tempfile.TemporaryDirectory() as tmp:
        async with running_gateway(Path(tmp), table) as gw:
            calls = [
                gw.call("/v1/chat/completions", body_for(kind, i, stream), leave_after=leave)
                for i, (_, kind, stream, leave) in enumerate(schedule)
            ]
            replies = await asyncio.gather(*calls)  # concurrently, as a server sees them
            admitted = [r.outcome for r in replies if r.outcome and r.outcome.admitted]
            assert all(r.outcome is not None for r in replies)  # exactly one outcome each
            assert len({o.arrival.request_id for o in gw.outcomes}) == len(replies)
            assert gw.limiter.in_flight() == 0
            for outcome in admitted:
                assert gw.limiter.settled[outcome.arrival.request_id] == 1
                if outcome.reached_upstream:
                    assert outcome.usage.input_tokens >= (outcome.prompt_tokens or 0) or (
                        outcome.usage.source is UsageSource.UPSTREAM
                    )
                    assert outcome.usage.source is not UsageSource.NONE
                if outcome.ending is Ending.CLIENT_GONE and outcome.reached_upstream:
                    assert outcome.usage.total > 0  # leaving early is never free
            assert sum(gw.limiter.settled.values()) == len(admitted)
        rows = gw.ledger_rows()
        assert sorted(r["request_id"] for r in rows) == sorted(
            o.arrival.request_id for o in admitted
        )
