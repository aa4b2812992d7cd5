"""Tracing benchmark: gateway requests/s with tracing off, on at sampling 1.0 and on at 0.01,
against the simulator in no-delay mode, and the cost per request of each.

Part 1 (in this process): the tracing work of one request alone (server span middleware around
an upstream attempt with its prefill/decode spans from a metered 16-token stream), per mode, with
spans exported over OTLP/HTTP to a real receiver. Part 2: the simulator, the OTLP receiver and wrk
on core 0, one gateway worker per mode on core 1 (``taskset``); non-streaming and streaming,
concurrency 64, ``--rounds`` interleaved runs. The cost per request is the gateway process's own
CPU time (user + system from /proc, the exporter thread included) over the requests served:
unlike requests/s it barely moves when other work shares the machine.

    .venv/bin/python loadtests/bench_tracing.py [--seconds 5] [--rounds 2] [--calls 20000]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson
import yaml
from bench_overhead import (
    LOAD_CORE,
    MODEL,
    PROXY_CORE,
    Processes,
    free_port,
    gateway_config,
    start_sim,
    wait_http,
)
from bench_overhead import wrk as run_wrk

from gateway.asgi import Message, Receive, Scope, Send
from gateway.metrics import GatewayMetrics
from gateway.proxy.record import observe
from gateway.telemetry import Tracing, TracingConfig, build_tracing
from gateway.telemetry.attempt import UpstreamAttempts
from gateway.telemetry.server import ServerSpanMiddleware
from gateway.wire.meter import StreamMeter
from gateway.wire.outcome import (
    ARRIVAL_KEY,
    OUTCOME_KEY,
    Arrival,
    Ending,
    Outcome,
    OutcomeSlot,
    RouteFacts,
    outcome_slot,
)
from gateway.wire.request import Operation, ParsedRequest, parse_request
from gateway.wire.usage import settle_usage

HERE = Path(__file__).resolve().parent
MODES: dict[str, dict[str, Any]] = {
    "off": {},
    "on, sampling 1.0": {"enabled": True, "sampling_ratio": 1.0},
    "on, sampling 0.01": {"enabled": True, "sampling_ratio": 0.01},
}
CHUNK = b'data: {"id":"c","model":"m","choices":[{"index":0,"delta":{"content":"tok"}}]}\n\n'
USAGE = b'data: {"id":"c","choices":[],"usage":{"prompt_tokens":9,"completion_tokens":16}}\n\n'


def request_parts() -> tuple[ParsedRequest, StreamMeter]:
    body = orjson.dumps(
        {"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "stream": True}
    )
    meter = StreamMeter()  # metered once: the meter's own cost is not tracing's
    for _ in range(16):
        meter.feed(CHUNK)
    meter.feed(USAGE)
    return parse_request(Operation.CHAT, body, 1_000_000), meter


def outcome_of(arrival: Arrival, request: ParsedRequest, meter: StreamMeter) -> Outcome:
    """The request's one outcome, as gateway/proxy/record.py builds it."""
    delivered = meter.delivered(
        status=200, upstream_status=200, first_byte_at=time.perf_counter(), error_code=None
    )
    usage = settle_usage(
        reported=delivered.upstream_usage,
        reached=True,
        complete=True,
        prompt_tokens=lambda: 9,
        output_text="",
        content_events=delivered.content_events,
        count_text=None,
    )
    return Outcome(
        arrival, "POST", "/v1/chat/completions", request.operation, MODEL, True, None, None,
        RouteFacts("default", "sim", "http://127.0.0.1:9", "single_pool"), delivered,
        Ending.COMPLETE, True, True, usage, 9, time.perf_counter(),
    )  # fmt: skip


def traced_request(tracing: Tracing, metrics: GatewayMetrics) -> Callable[[], Awaitable[None]]:
    """The tracing work of one streamed request, as the gateway does it, minus the I/O."""
    request, meter = request_parts()

    async def pipeline(scope: Scope, receive: Receive, send: Send) -> None:
        arrival: Arrival = scope[ARRIVAL_KEY]
        attempts = UpstreamAttempts(tracing, arrival, request)
        with attempts.sending("http://127.0.0.1:9") as attempt:
            attempt.headers  # noqa: B018 (what the handler reads)
        outcome = outcome_of(arrival, request, meter)
        attempts.end(outcome)
        observe(metrics, outcome)
        outcome_slot(scope).put(outcome)

    middleware = ServerSpanMiddleware(
        pipeline, tracing=tracing, traced_paths=["/v1/chat/completions"]
    )
    return _caller(middleware)


def bare_request(metrics: GatewayMetrics) -> Callable[[], Awaitable[None]]:
    """The same request with no tracing code at all: only the per-phase metrics."""
    _, meter = request_parts()

    request, _ = request_parts()

    async def pipeline(scope: Scope, receive: Receive, send: Send) -> None:
        observe(metrics, outcome_of(scope[ARRIVAL_KEY], request, meter))

    return _caller(pipeline)


def _caller(
    app: Callable[[Scope, Receive, Send], Awaitable[None]],
) -> Callable[[], Awaitable[None]]:
    scope: Scope = {
        "type": "http",
        "method": "POST",
        "path": "/v1/chat/completions",
        "headers": [(b"host", b"x"), (b"content-type", b"application/json")],
    }

    async def run() -> None:
        scope[ARRIVAL_KEY] = Arrival("id", None, time.perf_counter(), time.time())
        scope[OUTCOME_KEY] = OutcomeSlot()
        await app(scope, _receive, _send)

    return run


async def _receive() -> Message:
    return {"type": "http.request", "body": b""}


async def _send(message: Message) -> None:
    return None


async def micro(endpoint: str, calls: int) -> dict[str, float]:
    """Microseconds per request (best of 5 rounds: the least disturbed) for each mode."""
    figures = {"no tracing code": await _per_call(bare_request(GatewayMetrics()), calls)}
    for mode, tracing_config in MODES.items():
        config = TracingConfig(**tracing_config, endpoint=endpoint)
        tracing = build_tracing(config, {"OTEL_BSP_MAX_QUEUE_SIZE": "65536"})
        figures[mode] = await _per_call(traced_request(tracing, GatewayMetrics()), calls)
        tracing.shutdown()
    return figures


async def _per_call(run: Callable[[], Awaitable[None]], calls: int) -> float:
    rounds = []
    for _ in range(5):
        start = time.perf_counter()
        for _ in range(calls // 5):
            await run()
        rounds.append((time.perf_counter() - start) / (calls // 5) * 1e6)
    return min(rounds)


def start_gateway(
    procs: Processes, sim: str, folder: Path, tracing: dict[str, Any]
) -> tuple[str, int]:
    """One gateway worker on the proxy core; its URL and pid."""
    port = free_port()
    # The overhead benchmark's plain gateway (no keys, no ledger), plus the tracing section.
    config = {**gateway_config(port, sim, folder / str(port), full=False), "tracing": tracing}
    (folder / str(port)).mkdir()
    path = folder / f"gateway-{port}.yaml"
    path.write_text(yaml.safe_dump(config))
    log = (folder / f"gateway-{port}.log").open("wb")
    command = [sys.executable, "-m", "gateway", "run", "--config", str(path)]
    proc = subprocess.Popen(
        ["taskset", "-c", PROXY_CORE, *command], stdout=log, stderr=subprocess.STDOUT
    )
    procs.procs.append(proc)
    url = f"http://127.0.0.1:{port}"
    wait_http(url + "/healthz")
    return url, proc.pid


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process (its threads included: the span exporter's too)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


@dataclass
class Run:
    rps: float
    cpu_us_per_request: float


def http_runs(
    sim: str, endpoint: str, folder: Path, seconds: float, rounds: int
) -> dict[tuple[str, str], list[Run]]:
    """Per (mode, json|stream), one Run per round; the modes' gateways run side by side.

    requests/s moves with whatever else the machine runs; the gateway's own CPU time per request
    (from /proc) is what tracing adds, and much less disturbed by neighbours.
    """
    procs = Processes()
    runs: dict[tuple[str, str], list[Run]] = {}
    try:
        gateways = {
            mode: start_gateway(procs, sim, folder, {**cfg, "endpoint": endpoint} if cfg else {})
            for mode, cfg in MODES.items()
        }
        for _ in range(rounds):
            for stream in (False, True):
                kind = "stream" if stream else "json"
                for mode, (url, pid) in gateways.items():
                    try:
                        run_wrk(url, 64, 1, stream)  # warm-up
                    except RuntimeError:
                        port = url.rsplit(":", 1)[1]
                        log = (folder / f"gateway-{port}.log").read_text(errors="replace")
                        print(f"{mode} failed; its log ends:\n{log[-3000:]}", file=sys.stderr)
                        raise
                    time.sleep(0.3)  # let the exporter drain the warm-up's spans
                    before = cpu_seconds(pid)
                    rps, _, _, count = run_wrk(url, 64, seconds, stream)
                    time.sleep(0.3)  # and this run's, so that their export is counted
                    run = Run(rps, (cpu_seconds(pid) - before) / count * 1e6)
                    runs.setdefault((mode, kind), []).append(run)
                    print(f"{mode:18} {kind:6} {rps:8,.0f} req/s", file=sys.stderr)
    finally:
        procs.stop()
    return runs


def report(micro_us: dict[str, float], runs: dict[tuple[str, str], list[Run]]) -> str:
    lines = ["In-process work per streamed request (16 tokens), best of 5 rounds:"]
    bare = micro_us["no tracing code"]
    for mode, us in micro_us.items():
        lines.append(f"  {mode:18} {us:7.1f} us  ({us - bare:+.1f} us)")
    lines += [
        "",
        "Gateway (one worker, own core), concurrency 64, median of rounds:",
        "| mode | kind | req/s | gateway CPU us/request | added us/request | rounds (req/s) |",
        "|---|---|---|---|---|---|",
    ]
    for (mode, kind), mode_runs in runs.items():
        rps = statistics.median(r.rps for r in mode_runs)
        cpu = statistics.median(r.cpu_us_per_request for r in mode_runs)
        off = statistics.median(r.cpu_us_per_request for r in runs[("off", kind)])
        rounds = ", ".join(f"{r.rps:,.0f}" for r in mode_runs)
        lines.append(f"| {mode} | {kind} | {rps:,.0f} | {cpu:.0f} | {cpu - off:+.0f} | {rounds} |")
    return "\n".join(lines)


def start_receiver(procs: Processes) -> tuple[str, subprocess.Popen[bytes]]:
    """The tests' real OTLP receiver, as a process of its own on the load core."""
    proc = subprocess.Popen(
        ["taskset", "-c", LOAD_CORE, sys.executable, "-m", "tests.otlpreceiver"],
        cwd=HERE.parent,
        stdout=subprocess.PIPE,
    )
    procs.procs.append(proc)
    assert proc.stdout is not None
    line = proc.stdout.readline().decode().split()
    return line[1], proc


def spans_received(proc: subprocess.Popen[bytes]) -> int:
    proc.send_signal(signal.SIGINT)
    out, _ = proc.communicate(timeout=30)
    return int(out.decode().split("OTLP_SPANS")[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=5)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--calls", type=int, default=20000, help="in-process requests per mode")
    parser.add_argument("--skip-http", action="store_true")
    args = parser.parse_args()
    procs = Processes()
    try:
        endpoint, receiver = start_receiver(procs)
        os.sched_setaffinity(0, {int(PROXY_CORE)})  # part 1 where the gateway will run
        micro_us = asyncio.run(micro(endpoint, args.calls))
        os.sched_setaffinity(0, {int(LOAD_CORE)})
        runs: dict[tuple[str, str], list[Run]] = {}
        if not args.skip_http:
            sim = start_sim(procs)
            wait_http(sim + "/health")
            with tempfile.TemporaryDirectory() as folder:
                runs = http_runs(sim, endpoint, Path(folder), args.seconds, args.rounds)
        spans = spans_received(receiver)
    finally:
        procs.stop()
    print(report(micro_us, runs))
    print(f"\nspans received by the OTLP receiver: {spans:,}")


if __name__ == "__main__":
    main()
