"""Generate one completion on the simulator's timing model, streamed or answered whole.

Order of a stream: response headers at once; then after the time to first token (prefill) the
role chunk (chat only) and the first token; each further token after one decode interval; then
the usage chunk when asked for, and ``data: [DONE]``. A non-streaming request waits the same
total time, then answers.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass

from serve_app.sim import text
from serve_app.sim.asgi import Receive, Send, abort_connection, send_bytes, start_stream
from serve_app.sim.engine import SimEngine
from serve_app.sim.plan import CompletionPlan
from serve_app.sim.records import RequestRecord
from serve_app.sim.settings import SimSettings
from serve_app.sim.steering import Steering
from serve_app.sim.wire import SSE_DONE, ChatWireFormat, Completion, WireFormat


class TimingModel:
    """Prefill and decode delays; counts the decodes in progress for the concurrency term."""

    def __init__(self, settings: SimSettings) -> None:
        self._settings = settings
        self.active_decodes = 0

    def ttft_s(self, prompt_tokens: int, steering: Steering) -> float:
        s = self._settings
        if s.no_delay:
            return 0.0
        if steering.ttft_ms is not None:
            return steering.ttft_ms / 1000
        return (s.ttft_base_ms + s.ttft_per_token_ms * prompt_tokens) / 1000

    def itl_s(self, steering: Steering) -> float:
        s = self._settings
        if s.no_delay:
            return 0.0
        if steering.itl_ms is not None:
            return steering.itl_ms / 1000
        others = max(self.active_decodes - 1, 0)
        return (s.itl_ms + s.itl_per_concurrent_ms * others) / 1000


async def pause(seconds: float) -> None:
    """Sleep only for a positive delay: the no-delay path never touches the event loop timer."""
    if seconds > 0:
        await asyncio.sleep(seconds)


@dataclass(slots=True)
class Generation:
    """Everything one completion needs while it runs."""

    plan: CompletionPlan
    wire: WireFormat
    completion: Completion
    steering: Steering
    record: RequestRecord
    timing: TimingModel
    engine: SimEngine | None = None
    """The capacity model's engine; None paces this request on its own (``TimingModel``)."""
    tokens: Sequence[str] = ()
    """The prompt as the simulator's tokens (for the engine's prefix cache)."""
    cached_tokens: int | None = None
    """Set by the engine: prompt tokens found in its prefix cache."""

    @property
    def on_engine(self) -> bool:
        # Per-request timing headers keep their meaning: such a request bypasses the engine.
        s = self.steering
        return self.engine is not None and s.ttft_ms is None and s.itl_ms is None


Emit = Callable[[int], Awaitable[None]]


async def _decode(g: Generation, emit: Emit | None) -> bool:
    """Produce the tokens one by one; False when ``x-sim-fail-after`` says to abort."""
    if g.on_engine:
        return await _decode_on_engine(g, emit)
    await pause(g.timing.ttft_s(g.plan.prompt_tokens, g.steering))
    g.timing.active_decodes += 1
    try:
        for k in range(g.plan.generated):
            if k:
                await pause(g.timing.itl_s(g.steering))
            if g.steering.fail_after == k:
                return False
            if emit is not None:
                await emit(k)
            if k == 0:
                g.record["first_token_at"] = time.time()
    finally:
        g.timing.active_decodes -= 1
    return True


async def _decode_on_engine(g: Generation, emit: Emit | None) -> bool:
    """The tokens as the shared engine produces them (queued, batched, prefix-cached)."""
    assert g.engine is not None
    async with g.engine.request(g.tokens, g.plan.max_tokens) as run:
        async for k in run.tokens():
            if g.steering.fail_after == k:
                return False
            if emit is not None:
                await emit(k)
            if k == 0:
                g.record["first_token_at"] = time.time()
        g.cached_tokens = run.seq.cached_tokens
    return True


async def _abort(g: Generation, send: Send, receive: Receive) -> None:
    g.record["aborted"] = True
    g.record["completed_at"] = time.time()
    await abort_connection(send, receive)


async def stream_completion(g: Generation, send: Send, receive: Receive) -> None:
    """Answer with a server-sent-event stream, one token per chunk."""
    plan, wire, c = g.plan, g.wire, g.completion
    last = plan.generated - 1

    async def emit(k: int) -> None:
        finish = plan.finish_reason if k == last else None
        if plan.tool_call is not None and isinstance(wire, ChatWireFormat):
            chunk = wire.tool_chunk(c, plan.tool_call, k, finish)
        else:
            chunk = b"".join(
                wire.token_chunk(c, text.token_text(plan.seed + i, k), finish, index=i)
                for i in range(plan.choices)
            )
        if k == 0 and wire.has_role_chunk:
            chunk = wire.role_chunk(c) + chunk
        await send({"type": "http.response.body", "body": chunk, "more_body": True})
        g.record["chunks_sent"] = k + 1

    await start_stream(send)
    g.record["status"] = 200
    if not await _decode(g, emit):
        await _abort(g, send, receive)
        return
    tail = SSE_DONE
    if plan.include_usage:
        used = plan.generated * plan.choices
        tail = wire.usage_chunk(c, plan.prompt_tokens, used, g.cached_tokens)
        tail += SSE_DONE
    await send({"type": "http.response.body", "body": tail, "more_body": False})
    g.record["completed_at"] = time.time()


async def answer_completion(g: Generation, send: Send, receive: Receive) -> None:
    """Answer with one JSON body after the whole generation time."""
    if not await _decode(g, None):
        await _abort(g, send, receive)
        return
    plan = g.plan
    if plan.tool_call is not None and isinstance(g.wire, ChatWireFormat):
        body = g.wire.tool_response(
            g.completion, plan.tool_call, plan.prompt_tokens, plan.max_tokens, g.cached_tokens
        )
        g.record["status"] = 200
        await send_bytes(send, 200, body)
        g.record["completed_at"] = time.time()
        return
    body = g.wire.response(
        g.completion,
        [text.output_text(plan.seed + i, plan.generated) for i in range(plan.choices)],
        plan.finish_reason,
        plan.prompt_tokens,
        plan.generated * plan.choices,
        g.cached_tokens,
    )
    g.record["status"] = 200
    await send_bytes(send, 200, body)
    g.record["completed_at"] = time.time()
