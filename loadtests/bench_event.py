"""The gateway's own cost per SSE event at one event a read, in-process, without sockets.

A paced stream (an engine's: a token every few tens of ms) reaches the gateway one event a read,
so what decides how many streams a core relays is the cost per event, not per request. This
times the parts of that path the gateway owns, on the fast simulator's vLLM-format events
(``fast_sim.answers``), each stage alone and then together:

- ``meter``: ``StreamMeter.feed`` per event, one event a chunk (the paced case) and the whole
  stream in one chunk (the unpaced fast path), with and without stripping the usage event;
- ``client+relay``: the upstream client's connection fed the stream's HTTP chunked encoding
  one event per turn of uvloop's event loop (httptools parser, the response's queue and waiter, its
  ``chunks()`` iterator), relayed by ``Relay`` to an ASGI ``send`` that does nothing; so it is
  the gateway's side of one event short of uvicorn's write path (the socket write, timed by
  the paced case of ``bench_overhead.py`` and its py-spy profile).

    .venv/bin/python loadtests/bench_event.py [--streams 2000]
    PYTHONPATH=<another tree> .venv/bin/python loadtests/bench_event.py   # that tree's gateway
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import uvloop
from fast_sim import MODEL, answers

from gateway.asgi import Message
from gateway.proxy.endpoint import AsgiSink
from gateway.proxy.relay import Relay
from gateway.upstream.config import Timeouts
from gateway.upstream.http1 import Http1Upstream, _Connection, target
from serve_app.sim.wire import SSE_DONE

CHUNKS = 32


def stream_events() -> list[bytes]:
    """One stream's events as the fast simulator sends them, usage and ``[DONE]`` included."""
    _, events, usage = answers(CHUNKS, MODEL)
    return [*events, usage, SSE_DONE]


def time_meter(events: list[bytes], streams: int, *, one_a_read: bool, strip: bool) -> float:
    """us per event of ``StreamMeter.feed`` (plus ``delivered``, once a stream)."""
    from gateway.wire.meter import StreamMeter

    whole = b"".join(events)
    start = time.process_time()
    for _ in range(streams):
        meter = StreamMeter(strip_usage=strip)
        if one_a_read:
            for event in events:
                meter.feed(event)
        else:
            meter.feed(whole)
        meter.delivered(status=200, upstream_status=200, first_byte_at=0.0, error_code=None)
    return (time.process_time() - start) / (streams * len(events)) * 1e6


class _Transport:
    """Enough of an asyncio transport for the upstream connection: writes go nowhere."""

    def write(self, data: bytes) -> None:
        pass

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass

    def abort(self) -> None:
        pass

    def close(self) -> None:
        pass


class _Settings:
    timeouts = Timeouts()
    max_connections = 8


def chunked(event: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(event), event)


HEAD = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"


async def time_turns(events: list[bytes], streams: int) -> float:
    """us per event of the loop alone: the turns ``time_relay`` takes, with nothing fed."""
    start = time.process_time()
    for _ in range(streams):
        for _ in range(len(events) + 2):
            await asyncio.sleep(0)
    return (time.process_time() - start) / (streams * len(events)) * 1e6


async def _discard(message: Message) -> None:
    pass


async def _discard_receive() -> Message:
    return {"type": "http.disconnect"}


async def time_relay(events: list[bytes], streams: int, *, strip: bool) -> float:
    """us per event of the upstream client and the relay, one event an event-loop turn."""
    pool = Http1Upstream(_Settings())
    key = target("http://127.0.0.1:1/v1/chat/completions").key
    wire = [chunked(e) for e in events] + [b"0\r\n\r\n"]

    nothing = AsgiSink(_discard, _discard_receive)

    async def one_stream(connection: _Connection) -> None:
        pool._open += 1
        response = await pool._exchange(key, b"POST / HTTP/1.1\r\n\r\n")
        relay = Relay(nothing, strip_usage=strip)
        await relay.answer(response, [])
        relay.delivered()
        response.release()

    connection = _Connection(pool, key)
    connection.connection_made(_Transport())  # type: ignore[arg-type]
    pool._idle[key] = [connection]
    total = 0.0
    for _ in range(streams):
        connection.idle_since = pool._clock()
        pool._idle[key] = [connection]
        task = asyncio.ensure_future(one_stream(connection))
        await asyncio.sleep(0)  # the request is written; now the answer, a read a turn
        start = time.process_time()
        connection.data_received(HEAD)
        for piece in wire:
            await asyncio.sleep(0)
            connection.data_received(piece)
        await task
        total += time.process_time() - start
        connection.parser = type(connection.parser)(connection)
    return total / (streams * len(events)) * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--streams", type=int, default=2000)
    parser.add_argument("--repeat", type=int, default=5, help="the best of N (CPU time)")
    args = parser.parse_args()
    events = stream_events()
    n, best = args.streams, args.repeat
    rows: list[tuple[str, Any]] = []
    for strip in (False, True):
        label = "stripped" if strip else "kept"
        meter_one = min(time_meter(events, n, one_a_read=True, strip=strip) for _ in range(best))
        meter_all = min(time_meter(events, n, one_a_read=False, strip=strip) for _ in range(best))
        turns = min(uvloop.run(time_turns(events, n)) for _ in range(best))
        relay = min(uvloop.run(time_relay(events, n, strip=strip)) for _ in range(best))
        rows += [
            (f"meter, one event a read, usage {label}", meter_one),
            (f"meter, the stream in one read, usage {label}", meter_all),
            (f"client + relay + meter, one event a loop turn, usage {label}", relay - turns),
        ]
    import gateway

    print(f"gateway from {Path(gateway.__file__).parent}")
    print(f"{len(events)} events a stream, {n} streams, best of {best}, CPU time; the loop's")
    print(f"own turns ({turns:.2f} us/event) taken off the client + relay row")
    print("| path | us/event |\n|---|---|")
    for label, us in rows:
        print(f"| {label} | {us:.2f} |")


if __name__ == "__main__":
    main()
