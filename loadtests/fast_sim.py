"""The fast simulator: a fixed-answer OpenAI upstream for overhead benchmarks, served by granian.

The project's simulator (``serve_app/sim``) plans and paces every answer and tops out at about
2.9k streams/s here, which is below what the floor proxy can relay: a proxy-vs-floor ratio would
then measure the simulator. This one only answers. Each body is built once at start-up with the
simulator's own wire format (``serve_app/sim/wire.py``, so the bytes are vLLM's), and a request
costs a JSON parse plus a few sends: granian (Rust HTTP, one worker) serves it at several times
the floor's rate, which ``bench_overhead.py`` checks before it trusts a ratio.

``POST /v1/chat/completions``: a ``chat.completion`` with usage, or with ``"stream": true`` the
role chunk, ``--chunks`` content events (one send each, as an engine emits them), the
finish chunk, the usage chunk when ``stream_options.include_usage`` asks for it, and ``[DONE]``.
``GET /health`` and ``GET /v1/models`` answer for readiness checks.

``--pace-ms N`` paces each stream like an engine decoding: the role chunk and the first token
at once, then one content event every N ms (the finish and usage chunks and ``[DONE]`` right
after the last), so a proxy reads one event a read, as it does in front of a real engine;
without it every event is sent at once and a proxy reads several a read (the meter's fast
path).

Served through granian's RSGI interface (``--interface asgi`` for the ASGI one): measured here,
RSGI serves 36-event streams at 20.9k/s against ASGI's 6.4k (concurrency 64, one core shared
with wrk), which is what gives the streaming cells their 3x headroom over the floor.

    python loadtests/fast_sim.py --port 8001 [--chunks 32] [--interface rsgi|asgi] [--pace-ms 20]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from pathlib import Path
from typing import Any

import orjson

from serve_app.sim.wire import SSE_DONE, ChatWireFormat, Completion, models_body

MODEL = "sim-model"
PROMPT_TOKENS = 12


def answers(chunks: int, model: str) -> tuple[bytes, list[bytes], bytes]:
    """The JSON answer, the stream's events before the usage chunk, and the usage chunk."""
    wire = ChatWireFormat()
    c = Completion(id="chatcmpl-fastsim", created=1_700_000_000, model=model)
    words = [f" w{i}" for i in range(chunks)]
    document = wire.response(c, ["".join(words)], "length", PROMPT_TOKENS, chunks)
    events = [wire.role_chunk(c)]
    events += [wire.token_chunk(c, w, None) for w in words]
    events.append(wire.token_chunk(c, "", "length"))
    return document, events, wire.usage_chunk(c, PROMPT_TOKENS, chunks)


def make_app(chunks: int, model: str, pace: float = 0.0) -> Any:
    document, events, usage_event = answers(chunks, model)
    json_start = {
        "type": "http.response.start",
        "status": 200,
        "headers": [
            (b"content-type", b"application/json"),
            (b"content-length", str(len(document)).encode()),
        ],
    }
    sse_start = {
        "type": "http.response.start",
        "status": 200,
        "headers": [(b"content-type", b"text/event-stream; charset=utf-8")],
    }
    models = models_body((model,), 4096, 1_700_000_000)

    async def app(scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        if scope["method"] == "GET":
            body = models if scope["path"] == "/v1/models" else b"{}"
            await send({**json_start, "headers": [(b"content-type", b"application/json")]})
            await send({"type": "http.response.body", "body": body})
            return
        raw = b""
        more = True
        while more:
            message = await receive()
            raw += message.get("body", b"")
            more = message.get("more_body", False)
        request = orjson.loads(raw)
        if not request.get("stream"):
            await send(json_start)
            await send({"type": "http.response.body", "body": document})
            return
        await send(sse_start)
        for i, event in enumerate(events):
            if pace and 1 < i < len(events) - 1:  # a token each ``pace``; the finish with the last
                await asyncio.sleep(pace)
            await send({"type": "http.response.body", "body": event, "more_body": True})
        if (request.get("stream_options") or {}).get("include_usage"):
            await send({"type": "http.response.body", "body": usage_event, "more_body": True})
        await send({"type": "http.response.body", "body": SSE_DONE})

    return app


def make_rsgi_app(chunks: int, model: str, pace: float = 0.0) -> Any:
    """The same answers through granian's RSGI interface: no ASGI message dicts, a send is one
    call into Rust, so the upstream keeps well ahead of the proxies it feeds (streams above all:
    36 sends each)."""
    document, events, usage_event = answers(chunks, model)
    json_headers = [("content-type", "application/json")]
    sse_headers = [("content-type", "text/event-stream; charset=utf-8")]
    models = models_body((model,), 4096, 1_700_000_000)

    async def app(scope: Any, proto: Any) -> None:
        if scope.proto != "http":
            return
        if scope.method == "GET":
            body = models if scope.path == "/v1/models" else b"{}"
            proto.response_bytes(200, json_headers, body)
            return
        request = orjson.loads(await proto())
        if not request.get("stream"):
            proto.response_bytes(200, json_headers, document)
            return
        transport = proto.response_stream(200, sse_headers)
        for i, event in enumerate(events):
            if pace and 1 < i < len(events) - 1:
                await asyncio.sleep(pace)
            await transport.send_bytes(event)
        if (request.get("stream_options") or {}).get("include_usage"):
            await transport.send_bytes(usage_event)
        await transport.send_bytes(SSE_DONE)

    return app


def from_env() -> Any:
    """The app for granian's worker process (a factory: the worker imports this module anew)."""
    make = make_rsgi_app if os.environ.get("FAST_SIM_INTERFACE") == "rsgi" else make_app
    pace = float(os.environ.get("FAST_SIM_PACE_MS", "0")) / 1000
    return make(int(os.environ["FAST_SIM_CHUNKS"]), os.environ["FAST_SIM_MODEL"], pace)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--chunks", type=int, default=32)
    parser.add_argument("--model", default=MODEL)
    parser.add_argument("--interface", choices=["rsgi", "asgi"], default="rsgi")
    parser.add_argument(
        "--pace-ms", type=float, default=0, help="one content event every N ms (0: all at once)"
    )
    args = parser.parse_args()
    from granian.constants import Interfaces, Loops
    from granian.server import Server

    os.environ["FAST_SIM_CHUNKS"], os.environ["FAST_SIM_MODEL"] = str(args.chunks), args.model
    os.environ["FAST_SIM_INTERFACE"] = args.interface
    os.environ["FAST_SIM_PACE_MS"] = str(args.pace_ms)
    here = str(Path(__file__).resolve().parent)
    os.environ["PYTHONPATH"] = os.pathsep.join([here, os.environ.get("PYTHONPATH", "")])
    sys.path.insert(0, here)
    print(f"fast simulator on http://127.0.0.1:{args.port}", flush=True)
    Server(
        "fast_sim:from_env",
        address="127.0.0.1",
        port=args.port,
        interface=Interfaces.RSGI if args.interface == "rsgi" else Interfaces.ASGI,
        workers=1,
        loop=Loops.uvloop,
        log_enabled=False,
        factory=True,
        working_dir=Path(here),
    ).serve()


if __name__ == "__main__":
    main()
