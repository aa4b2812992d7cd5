"""Rate limits and accounting benchmark: their cost per request, and gateway requests/s with
limits on versus off against the simulator in no-delay mode.

Part 1 runs in this process: one request's whole admission and accounting path, as the handler
runs it (count the prompt, reserve, ask for the usage chunk, settle to the usage, append the
ledger row), for a 1k-token and a 32k-token chat prompt, on the in-process limiter and on a real
Redis; the prompt counting alone is shown apart. Batch writes of the ledger (off the hot path)
are timed per row on SQLite. Part 2 runs the simulator and wrk on core 0 and one gateway worker
on core 1 (``taskset``), non-streaming, concurrency 64: limits off, on in-process, on Redis.

    PYTHONPATH=. .venv/bin/python loadtests/bench_limits.py [--calls N] [--seconds S] [--skip-http]

(``PYTHONPATH=.``: it starts Redis with tests/redisserver.py.)
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import orjson
import yaml
from bench_overhead import LOAD_CORE, MODEL, PROXY_CORE, Processes, free_port, start_sim, wait_http
from bench_overhead import wrk as run_wrk

from gateway.accounting.config import AccountingConfig
from gateway.accounting.ledger import Ledger, UsageRow
from gateway.accounting.ledger_sql import SqlLedgerStore
from gateway.accounting.stage import Accounting
from gateway.database import Database, StorageConfig
from gateway.limits.admission import RateLimiter
from gateway.limits.config import LimitsConfig, LimitValues
from gateway.metrics import GatewayMetrics
from gateway.runtime.migrations import all_migrations
from gateway.tokens import PromptTokens, TokenCounter, TokenizerConfig, build_token_counter
from gateway.wire.outcome import NOWHERE, Arrival, Delivered, Ending, Outcome
from gateway.wire.request import Operation, ParsedRequest, parse_request
from gateway.wire.usage import Usage
from tests.redisserver import spawn_redis

ROOMY = LimitValues(requests_per_minute=10**9, tokens_per_minute=10**12, concurrent_requests=10**6)
CORPUS = Path(orjson.__file__).parent.parent.joinpath("pydantic", "main.py").read_text()


def chat_body(counter: TokenCounter, tokens: int) -> bytes:
    """A chat request whose prompt is about ``tokens`` tokens."""
    text = CORPUS
    while counter.count_text(text) < tokens:
        text += CORPUS
    chars = int(len(text) * tokens / counter.count_text(text))
    body = {"model": MODEL, "messages": [{"role": "user", "content": text[:chars]}]}
    return orjson.dumps({**body, "max_tokens": 64, "stream": True})


async def per_call(
    call: Callable[[], Awaitable[None]], calls: int, rounds: int = 5
) -> tuple[float, float]:
    """Microseconds per call, CPU of this process and wall clock: medians of ``rounds`` rounds.
    The CPU figure is what the gateway's core pays; other processes on a busy machine do not
    inflate it (Redis's own work and the wait for it show in the wall figure only)."""
    cpu, wall = [], []
    for _ in range(rounds):
        start, start_cpu = time.perf_counter(), time.process_time()
        for _ in range(calls // rounds):
            await call()
        cpu.append((time.process_time() - start_cpu) / (calls // rounds) * 1e6)
        wall.append((time.perf_counter() - start) / (calls // rounds) * 1e6)
    return statistics.median(cpu), statistics.median(wall)


def accounting_for(limits: LimitsConfig) -> Accounting:
    metrics = GatewayMetrics()
    return Accounting(AccountingConfig(), RateLimiter.build(limits, metrics))


async def one_request_path(
    accounting: Accounting, counters: dict[str, TokenCounter], parsed: ParsedRequest
) -> None:
    """What the handler runs for one request around the exchange, in its order (the body was
    parsed before: the gateway parses it with or without limits)."""
    arrival = Arrival("bench", None, time.perf_counter(), time.time())
    request = parsed
    prompt = PromptTokens(counters[request.model], request.operation, request.payload)
    reservation = await accounting.admit(arrival, None, request, prompt, None)
    usage = Usage(prompt.counted or 0, 64)
    outcome = Outcome(
        arrival, "POST", "/v1/chat/completions", request.operation, request.model,
        request.stream, None, None, NOWHERE, Delivered(200, 200), Ending.COMPLETE, True, True,
        usage, prompt.counted, time.perf_counter(),
    )  # fmt: skip
    accounting.settle(reservation, outcome)


async def micro(calls: int) -> dict[str, tuple[float, float]]:
    counter = build_token_counter(TokenizerConfig())
    counters = {MODEL: counter}
    bodies = {size: chat_body(counter, size) for size in (1000, 32000)}
    parsed = {size: parse_request(Operation.CHAT, b, 10**6) for size, b in bodies.items()}
    figures: dict[str, tuple[float, float]] = {}
    with tempfile.TemporaryDirectory() as folder:
        db = Database.open(StorageConfig(url=f"sqlite:///{folder}/bench.db"))
        await db.migrate(all_migrations())
        redis = spawn_redis()
        try:
            backends = {
                "memory": LimitsConfig(defaults=ROOMY),
                "redis": LimitsConfig(backend="redis", redis_url=redis.url, defaults=ROOMY),
            }
            for name, limits in backends.items():
                accounting = accounting_for(limits)
                # The ledger buffers only here: its batch writes are timed apart, below.
                accounting.ledger = Ledger(SqlLedgerStore(db), batch_size=10**9, interval=3600)
                for size, request in parsed.items():
                    figures[f"{name} {size // 1000}k"] = await per_call(
                        lambda a=accounting, r=request: one_request_path(a, counters, r), calls
                    )
                    await accounting.limiter.backend.drain()  # Redis settles in the background
                await accounting.limiter.aclose()
            for size, body in bodies.items():
                payload = orjson.loads(body)

                async def count(p: dict[str, Any] = payload) -> None:
                    counter.count_request(Operation.CHAT, p)

                figures[f"counting alone {size // 1000}k"] = await per_call(count, calls)
            figures["ledger batch write, per row (sqlite)"] = await ledger_write(db)
        finally:
            redis.stop()
            await db.close()
    return figures


async def ledger_write(db: Database, rows: int = 20_000) -> tuple[float, float]:
    ledger = Ledger(SqlLedgerStore(db), batch_size=500)
    row = UsageRow(time.time(), "r", "t", "k", MODEL, "p", None, 1000, 64, 0, 1.0, 2.0, 200, False)
    for _ in range(rows):
        ledger.record(row)
    start, start_cpu = time.perf_counter(), time.process_time()
    await ledger.flush()
    return (time.process_time() - start_cpu) / rows * 1e6, (
        time.perf_counter() - start
    ) / rows * 1e6


def _gateway(procs: Processes, sim: str, folder: Path, limits: dict[str, Any]) -> str:
    port = free_port()
    config = {
        "server": {"host": "127.0.0.1", "port": port, "workers": 1, "access_log": True},
        "pools": {"sim": {"urls": [sim]}},
        "models": {MODEL: {"pool": "sim"}},
        "storage": {"url": f"sqlite:///{folder}/gw.db"},
        "auth": {"enabled": False},
        "limits": limits,
    }
    path = folder / f"gateway-{port}.yaml"
    path.write_text(yaml.safe_dump(config))
    log = (folder / f"gateway-{port}.log").open("wb")
    command = ["taskset", "-c", PROXY_CORE, sys.executable, "-m", "gateway", "run"]
    proc = subprocess.Popen(
        [*command, "--config", str(path)], stdout=log, stderr=subprocess.STDOUT, env=os.environ
    )
    procs.procs.append(proc)
    url = f"http://127.0.0.1:{port}"
    wait_http(url + "/healthz")
    return url


def http(seconds: float, rounds: int) -> list[tuple[str, float, float]]:
    results: list[tuple[str, float, float]] = []
    procs = Processes()
    redis = spawn_redis()
    roomy = ROOMY.model_dump()
    modes = {
        "off": {"enabled": False},
        "memory": {"defaults": roomy},
        "redis": {"backend": "redis", "redis_url": redis.url, "defaults": roomy},
    }
    try:
        sim = start_sim(procs)
        for _ in range(rounds):  # interleaved, so a busy moment hits every mode alike
            for mode, limits in modes.items():
                folder = Path(tempfile.mkdtemp(prefix="bench-limits-"))
                url = _gateway(procs, sim, folder, limits)
                rps, p50, _, _ = run_wrk(url, 64, seconds, stream=False)
                results.append((mode, rps, p50))
                print(f"{mode}: {rps:.0f} req/s, p50 {p50:.2f} ms", flush=True)
                procs.procs[-1].terminate()
                procs.procs[-1].wait(15)
    finally:
        procs.stop()
        redis.stop()
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--calls", type=int, default=20_000)
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--skip-http", action="store_true")
    args = parser.parse_args()
    print("per request                            cpu us    wall us")
    for name, (cpu, wall) in asyncio.run(micro(args.calls)).items():
        print(f"{name:<38} {cpu:>7.1f} {wall:>10.1f}")
    if args.skip_http:
        return
    results = http(args.seconds, args.rounds)
    print(f"\nlimits   req/s (best of {args.rounds}, concurrency 64)   p50 ms")
    for mode in ("off", "memory", "redis"):
        best = max((r for r in results if r[0] == mode), key=lambda r: r[1])
        print(f"{mode:<8} {best[1]:>10.0f} {best[2]:>22.2f}")
    print(f"(load core {LOAD_CORE}, gateway core {PROXY_CORE})")


if __name__ == "__main__":
    main()
