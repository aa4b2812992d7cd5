"""An upstream client for in-process tests, steered per request by a script.

It implements the gateway's own ``UpstreamClient`` protocol (the seam ``create_app`` takes as
``upstream_factory``), so the whole pipeline above it runs for real: parsing, auth, admission,
routing, retries, the relay, settling, the ledger (SQLite), metrics and the access log. What it
answers is read from the request itself: the body's ``script`` field (the gateway passes unknown
fields through) names a :class:`Script`, registered by the test; ``NAME@HOST`` registers what
the replica at HOST answers instead (one pool sick, the others not).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from urllib.parse import urlsplit

import orjson

from gateway.errors import UpstreamError, UpstreamTimeout
from gateway.routing.config import PoolConfig
from gateway.upstream.client import UpstreamConnectError


@dataclass(frozen=True)
class Script:
    """How the upstream answers one request."""

    kind: str = "stream"
    """``stream``, ``whole``, ``status``, ``connect_error``, ``timeout`` (before the answer)."""
    status: int = 200
    chunks: int = 3
    """Content chunks of a stream (each one token)."""
    usage: bool = True
    """Whether the stream ends with its usage chunk (when the gateway asked for it)."""
    fail_after: int | None = None
    """Break the stream after this many chunks: ``reset`` or ``stall`` (the idle deadline)."""
    failure: str = "reset"
    gap: float = 0.0
    """Seconds between chunks."""
    tool_call: bool = False
    """Answer with a call of the function ``lookup`` (its arguments in ``chunks`` pieces)."""
    unended: int = 0
    """After the content chunks, this many bytes of one event never ended (64 KiB pieces)."""
    first_token: asyncio.Event | None = None
    """The stream's first chunk waits for this (the engine still prefilling it)."""
    rest: asyncio.Event | None = None
    """The chunks after the first wait for this (the engine decoding it)."""
    cached: int = 0
    """Prompt tokens the usage says were served from the prefix cache (``cached_tokens``)."""


@dataclass
class ScriptedUpstream:
    """One per pool (the factory's product); every instance reads the same ``scripts``."""

    scripts: dict[str, Script]
    sent: list[dict[str, object]] = field(default_factory=list)
    closed: bool = False

    async def send(
        self, url: str, headers: Sequence[tuple[bytes, bytes]], body: bytes
    ) -> FakeResponse:
        if self.closed:
            raise RuntimeError("send on a closed upstream client")  # a reload bug would show
        payload = orjson.loads(body)
        self.sent.append({"url": url, "headers": dict(headers), "payload": payload})
        name = payload.get("script", "default")
        script = self.scripts.get(f"{name}@{urlsplit(url).hostname}") or self.scripts[name]
        await asyncio.sleep(0)
        if script.kind == "connect_error":
            raise UpstreamConnectError("Could not connect to the upstream: refused.")
        if script.kind == "timeout":
            raise UpstreamTimeout("The upstream did not answer within 1s.")
        include_usage = bool((payload.get("stream_options") or {}).get("include_usage"))
        if url.endswith("/v1/responses"):  # a pool that serves the Responses API natively
            return NativeResponse(script, bool(payload.get("stream")), include_usage)
        return FakeResponse(script, bool(payload.get("stream")), include_usage)

    async def probe(self, url: str, timeout_s: float) -> str | None:
        return None

    async def aclose(self) -> None:
        self.closed = True


class FakeResponse:
    def __init__(self, script: Script, stream: bool, include_usage: bool) -> None:
        self.script = script
        self.status = script.status if script.kind == "status" else 200
        self.is_event_stream = stream and self.status == 200
        self._include_usage = include_usage
        self.released = False
        self.aborted = False

    def relay_headers(self) -> list[tuple[bytes, bytes]]:
        kind = b"text/event-stream" if self.is_event_stream else b"application/json"
        return [(b"content-type", kind)]

    async def chunks(self) -> AsyncIterator[bytes]:
        script = self.script
        if not self.is_event_stream:
            yield self._document()
            return
        for i in range(script.chunks):
            if script.fail_after is not None and i == script.fail_after:
                await asyncio.sleep(0)
                if script.failure == "stall":
                    raise UpstreamTimeout("The upstream sent nothing for 1s.")
                raise UpstreamError("The upstream connection failed mid-response: reset.")
            if script.gap:
                await asyncio.sleep(script.gap)
            held = script.first_token if i == 0 else script.rest if i == 1 else None
            if held is not None:
                await held.wait()
            choice = _call_delta(i) if script.tool_call else _delta(f"tok{i} ")
            yield _event(_chunk([choice]))
        for start in range(0, script.unended, 1 << 16):
            yield b"x" * min(1 << 16, script.unended - start)
        if self._include_usage and script.usage:
            yield _event(_chunk([], usage=_usage(script.chunks, script.cached)))
        yield b"data: [DONE]\n\n"

    def _document(self) -> bytes:
        if self.status != 200:
            # vLLM's shape, with an integer code and (for a 5xx) internals in the message
            message = "upstream said no" if self.status < 500 else "Traceback (most recent call"
            error = {"message": message, "type": "BadRequestError", "code": self.status}
            return orjson.dumps({"error": error})
        message: dict[str, object] = {"role": "assistant", "content": "hi", "refusal": None}
        reason = "stop"
        if self.script.tool_call:
            call = {"id": "call_1", "type": "function", "function": _CALL}
            message = {**message, "content": None, "tool_calls": [call]}
            reason = "tool_calls"
        choice = {"index": 0, "message": message, "finish_reason": reason, "logprobs": None}
        document = {
            "id": "c1",
            "object": "chat.completion",
            "created": _CREATED,
            "model": "m",
            "choices": [choice],
            "usage": _usage(self.script.chunks, self.script.cached),
        }
        return orjson.dumps(document)

    async def read(self) -> bytes:
        return b"".join([chunk async for chunk in self.chunks()])

    def abort(self) -> None:
        self.aborted = True

    def release(self) -> None:
        self.released = True


class NativeResponse(FakeResponse):
    """The Responses API as a native server streams it (text deltas, usage in the last event)."""

    async def chunks(self) -> AsyncIterator[bytes]:
        if not self.is_event_stream:
            yield orjson.dumps(self._response("completed"))
            return
        events: list[dict[str, object]] = [
            {"type": "response.created", "response": self._response("in_progress")}
        ]
        for i in range(self.script.chunks):
            events.append(
                {
                    "type": "response.output_text.delta",
                    "item_id": "msg_native",
                    "output_index": 0,
                    "content_index": 0,
                    "delta": f"tok{i} ",
                    "logprobs": [],
                }
            )
        events.append({"type": "response.completed", "response": self._response("completed")})
        for number, event in enumerate(events):
            yield _event({**event, "sequence_number": number})

    def _response(self, status: str) -> dict[str, object]:
        """A response object with every field OpenAI's document requires."""
        done = status == "completed"
        output_tokens = self.script.chunks if done else 0
        text = "".join(f"tok{i} " for i in range(self.script.chunks))
        part = {"type": "output_text", "text": text, "annotations": [], "logprobs": []}
        message = {
            "type": "message",
            "id": "msg_native",
            "role": "assistant",
            "status": "completed",
            "content": [part],
        }
        return {
            "id": "resp_native",
            "object": "response",
            "created_at": _CREATED,
            "model": "m",
            "status": status,
            "output": [message] if done else [],
            "error": None,
            "incomplete_details": None,
            "instructions": None,
            "metadata": {},
            "parallel_tool_calls": True,
            "temperature": 1.0,
            "top_p": 1.0,
            "tool_choice": "auto",
            "tools": [],
            "usage": {
                "input_tokens": 13,
                "input_tokens_details": {"cached_tokens": 0, "cache_write_tokens": 0},
                "output_tokens": output_tokens,
                "output_tokens_details": {"reasoning_tokens": 0},
                "total_tokens": 13 + output_tokens,
            },
        }


_CALL = {"name": "lookup", "arguments": '{"city": "Oslo"}'}
_CREATED = 1_760_000_000


def _chunk(choices: list[dict[str, object]], **extra: object) -> dict[str, object]:
    """A chat stream chunk with every field OpenAI's document requires (vLLM sends them all)."""
    return {
        "id": "c1",
        "object": "chat.completion.chunk",
        "created": _CREATED,
        "model": "m",
        "choices": choices,
        **extra,
    }


def _usage(completion_tokens: int, cached: int = 0) -> dict[str, object]:
    usage: dict[str, object] = {
        "prompt_tokens": 11,
        "completion_tokens": completion_tokens,
        "total_tokens": 11 + completion_tokens,
    }
    if cached:
        usage["prompt_tokens_details"] = {"cached_tokens": cached}
    return usage


def _call_delta(i: int) -> dict[str, object]:
    """Piece ``i`` of the call: the first names it, each carries a slice of the arguments."""
    arguments = str(_CALL["arguments"])
    size = len(arguments) // 3 + 1
    function: dict[str, object] = {"arguments": arguments[i * size : (i + 1) * size]}
    call: dict[str, object] = {"index": 0, "function": function}
    if i == 0:
        call.update(id="call_1", type="function")
        function["name"] = _CALL["name"]
    return {"index": 0, "delta": {"tool_calls": [call]}, "finish_reason": None}


def _delta(text: str) -> dict[str, object]:
    return {"index": 0, "delta": {"content": text}, "finish_reason": None}


def _event(message: dict[str, object]) -> bytes:
    return b"data: " + orjson.dumps(message) + b"\n\n"


def factory(scripts: dict[str, Script]) -> tuple[list[ScriptedUpstream], object]:
    """An ``upstream_factory`` and the clients it made (one per pool, in order)."""
    made: list[ScriptedUpstream] = []

    def make(config: PoolConfig) -> ScriptedUpstream:
        client = ScriptedUpstream(scripts)
        made.append(client)
        return client

    return made, make
