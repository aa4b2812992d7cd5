"""Routing benchmark: the cost of one routing decision, and what routing by length buys.

Part 1 (in this process): microseconds per routing decision for a model with a PD and a
colocated pool: the prompt's token count (cl100k, chat template overhead included) plus the
variant choice and the pool plan, for prompts of about 20, 1k and 32k tokens; and, for contrast,
an unbounded exact tiktoken count of the same prompts.

Part 2 (real processes): two simulators with the timing model of a PD pool (KV transfer adds
to time to first token; decode runs on its own, so concurrency slows it less) and of a colocated
pool (no transfer; prefill and decode share the engine, so concurrency slows decode more), one
gateway with three model names over them: routed by prompt length, all PD, all colocated. A mix
of short and long streamed chat requests at fixed concurrency; client-side time to first token
and inter-token latency per prompt class. The figures follow from the simulator's timing model
(its knobs are printed); they show the routing works as designed, not how a real GPU behaves.

    .venv/bin/python loadtests/bench_routing.py [--requests 400] [--concurrency 32] [--skip-load]
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import random
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import orjson
import tiktoken
import yaml
from bench_overhead import Processes, free_port, wait_http

from gateway.config import GatewayConfig, parse_config
from gateway.metrics import GatewayMetrics
from gateway.routing.attempts import Attempts
from gateway.routing.metrics import RoutingMetrics
from gateway.routing.pools import Pool, Replica
from gateway.routing.router import ModelRouter
from gateway.routing.service import Caller
from gateway.runtime.table import build_table
from gateway.tokens import PromptTokens, TokenizerConfig, build_token_counter
from gateway.upstream.http1 import Http1Upstream
from gateway.wire.request import Operation, parse_request

PYTHON = sys.executable
MODEL = "sim-model"
THRESHOLD = 1024
SHORT_WORDS, LONG_WORDS = 60, 3000
MAX_TOKENS = 32
# Timing models (ms): PD pays a KV transfer before the first token and keeps decode isolated.
PD_SIM = ["--ttft-base-ms", "60", "--ttft-per-token-ms", "0.12", "--itl-ms", "8"]
PD_SIM += ["--itl-per-concurrent-ms", "0.05"]
COLO_SIM = ["--ttft-base-ms", "15", "--ttft-per-token-ms", "0.1", "--itl-ms", "8"]
COLO_SIM += ["--itl-per-concurrent-ms", "0.6"]


def words_of_tokens(encoding: tiktoken.Encoding, tokens: int) -> str:
    text = " ".join(f"word{i % 97}" for i in range(tokens))
    return encoding.decode(encoding.encode_ordinary(text)[:tokens])


def decision_costs(calls: int) -> list[tuple[str, int, float, float]]:
    """(label, counted tokens, us per routing decision, us per unbounded exact count)."""
    counter = build_token_counter(TokenizerConfig())  # also puts the BPE file where tiktoken looks
    encoding = tiktoken.get_encoding("cl100k_base")
    cfg = parse_config(_model_config("http://127.0.0.1:1", "http://127.0.0.1:2"), env={})
    pools = {name: Pool(name, p) for name, p in cfg.pools.items()}
    router = ModelRouter("routed", cfg.models["routed"], pools)
    rows = [single_pool_cost(cfg, pools, calls)]
    for label, tokens in (("short", 20), ("1k", 1000), ("32k", 32000)):
        payload = {"messages": [{"role": "user", "content": words_of_tokens(encoding, tokens)}]}
        n = max(20, calls // (1 + tokens // 500))

        started = time.perf_counter()
        for i in range(n):
            counted = counter.count_request(Operation.CHAT, payload)
            variant = router.choose_variant(b"key-%d" % i, None)
            router.plan(variant, counted, MAX_TOKENS, None)
        decision = (time.perf_counter() - started) / n * 1e6

        text = payload["messages"][0]["content"]
        started = time.perf_counter()
        for _ in range(n):
            encoding.encode_ordinary(text)
        exact = (time.perf_counter() - started) / n * 1e6
        rows.append((label, counted, decision, exact))
    return rows


def single_pool_cost(
    cfg: GatewayConfig, pools: dict[str, Pool], calls: int
) -> tuple[str, int, float, float]:
    """A ``pool:`` model: no counting, one variant, one pool."""
    router = ModelRouter("all-pd", cfg.models["all-pd"], pools)
    started = time.perf_counter()
    for _ in range(calls):
        router.plan(router.choose_variant(b"", None), 0, MAX_TOKENS, None)
    return ("any, single pool", 0, (time.perf_counter() - started) / calls * 1e6, 0.0)


class _Answer:
    """Stands in for an upstream response: the stage reads its status and hands it back."""

    status = 200

    def release(self) -> None:
        """Nothing to hand back: no connection was read."""

    def abort(self) -> None:
        """Nothing to drop."""


async def stage_cost(model: str, calls: int) -> float:
    """Microseconds per request for the whole route stage (count, variant, plan, replica choice,
    dispatch bookkeeping, metrics, outcome), the upstream call itself excluded."""
    cfg = parse_config(_model_config("http://127.0.0.1:1", "http://127.0.0.1:2"), env={})
    table = build_table(cfg, Http1Upstream, RoutingMetrics(GatewayMetrics()))
    route = table.models[model]
    body = orjson.dumps({"model": model, "messages": [{"role": "user", "content": "Say hi."}]})
    request = parse_request(Operation.CHAT, body, 100_000)
    answer = _Answer()
    caller = Caller(None, None, "127.0.0.1")

    async def send_via(pool: Pool, replica: Replica, upstream: str | None) -> Any:
        return answer

    started = time.perf_counter()
    for _ in range(calls):
        prompt = PromptTokens(route.counter, request.operation, request.payload)
        plan = table.routing.plan(route.router, request, (), caller, prompt)
        with Attempts() as attempts:
            await table.routing.dispatcher.first_answer(plan, send_via, attempts)
            attempts.settle(None, reusable=True)
    elapsed = (time.perf_counter() - started) / calls * 1e6
    for pool in table.pools.values():
        await pool.client.aclose()
    return elapsed


def _model_config(pd_url: str, colo_url: str) -> dict[str, Any]:
    return {
        "auth": {"enabled": False},
        "pools": {
            "pd": {"urls": [pd_url], "timeouts": {"first_byte": 60, "idle": 60}},
            "colo": {"urls": [colo_url], "timeouts": {"first_byte": 60, "idle": 60}},
        },
        "models": {
            "routed": {
                "variants": {"stable": {"weight": 1, "pools": {"pd": "pd", "colocated": "colo"}}},
                "routing": {"pd_threshold_tokens": THRESHOLD},
                "upstream_model": MODEL,
            },
            "all-pd": {"pool": "pd", "upstream_model": MODEL},
            "all-colocated": {"pool": "colo", "upstream_model": MODEL},
        },
    }


@dataclass
class Samples:
    ttft: list[float] = field(default_factory=list)
    itl: list[float] = field(default_factory=list)
    errors: int = 0


async def one_stream(client: httpx.AsyncClient, model: str, words: int, out: Samples) -> None:
    prompt = " ".join(random.choice(("alpha", "beta", "gamma", "delta")) for _ in range(words))
    body = {
        "model": model,
        "messages": [{"role": "user", "content": prompt}],
        "max_tokens": MAX_TOKENS,
        "stream": True,
    }
    started = time.perf_counter()
    times: list[float] = []
    async with client.stream("POST", "/v1/chat/completions", json=body) as response:
        if response.status_code != 200:
            out.errors += 1
            await response.aread()
            return
        async for line in response.aiter_lines():
            if line.startswith("data: {") and '"content":"' in line:
                times.append(time.perf_counter())
    if not times:
        out.errors += 1
        return
    out.ttft.append(times[0] - started)
    out.itl.extend(b - a for a, b in itertools.pairwise(times))


async def load(url: str, model: str, requests: int, concurrency: int) -> dict[str, Samples]:
    rng = random.Random(7)  # the same mix for every configuration
    mix = ["long" if rng.random() < 0.25 else "short" for _ in range(requests)]
    samples = {"short": Samples(), "long": Samples()}
    queue: asyncio.Queue[str] = asyncio.Queue()
    for kind in mix:
        queue.put_nowait(kind)
    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    async with httpx.AsyncClient(base_url=url, timeout=120, limits=limits) as client:

        async def worker() -> None:
            while not queue.empty():
                kind = queue.get_nowait()
                words = LONG_WORDS if kind == "long" else SHORT_WORDS
                await one_stream(client, model, words, samples[kind])

        await asyncio.gather(*(worker() for _ in range(concurrency)))
    return samples


def pct(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))] * 1000


def start_sim(procs: Processes, timing: list[str]) -> str:
    proc = procs.start(
        "0-1", PYTHON, "-m", "serve_app.sim", "--port", "0", "--model", MODEL,
        "--max-model-len", "100000", *timing,
    )  # fmt: skip
    assert proc.stdout is not None
    return proc.stdout.readline().decode().split()[-1]


def start_gateway(procs: Processes, config: dict[str, Any], workdir: Path) -> str:
    port = free_port()
    config = {**config, "server": {"host": "127.0.0.1", "port": port, "access_log": False}}
    path = workdir / "gateway.yaml"
    path.write_text(yaml.safe_dump(config))
    proc = subprocess.Popen(
        [PYTHON, "-m", "gateway", "run", "--config", str(path)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    procs.procs.append(proc)
    url = f"http://127.0.0.1:{port}"
    wait_http(url + "/healthz")
    return url


def load_table(requests: int, concurrency: int) -> str:
    procs = Processes()
    try:
        with tempfile.TemporaryDirectory() as tmp:
            pd, colo = start_sim(procs, PD_SIM), start_sim(procs, COLO_SIM)
            url = start_gateway(procs, _model_config(pd, colo), Path(tmp))
            asyncio.run(load(url, "routed", 40, 8))  # warm connections and code paths
            lines = [
                f"{requests} streamed chats, 25% long ({LONG_WORDS} tokens) / 75% short "
                f"({SHORT_WORDS}), {MAX_TOKENS} output tokens, concurrency {concurrency}",
                f"PD sim: {' '.join(PD_SIM)}",
                f"colocated sim: {' '.join(COLO_SIM)}",
                "",
                "| routing | class | TTFT p50 ms | TTFT p95 ms | ITL p50 ms | ITL p95 ms | err |",
                "|---|---|---|---|---|---|---|",
            ]
            for model in ("routed", "all-pd", "all-colocated"):
                samples = asyncio.run(load(url, model, requests, concurrency))
                for kind in ("short", "long"):
                    s = samples[kind]
                    lines.append(
                        f"| {model} | {kind} | {pct(s.ttft, 0.5):.1f} | {pct(s.ttft, 0.95):.1f} "
                        f"| {pct(s.itl, 0.5):.1f} | {pct(s.itl, 0.95):.1f} | {s.errors} |"
                    )
            return "\n".join(lines)
    finally:
        procs.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--calls", type=int, default=20000)
    parser.add_argument("--requests", type=int, default=400)
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--skip-load", action="store_true")
    args = parser.parse_args()
    print("| prompt | counted tokens | routing decision us | exact tiktoken count us |")
    print("|---|---|---|---|")
    for label, counted, decision, exact in decision_costs(args.calls):
        print(f"| {label} | {counted} | {decision:.1f} | {exact:.1f} |")
    print()
    print("| model | whole route stage us/request (short prompt, no upstream) |")
    print("|---|---|")
    for model in ("all-pd", "routed"):
        print(f"| {model} | {asyncio.run(stage_cost(model, args.calls)):.1f} |")
    if not args.skip_load:
        print()
        print(load_table(args.requests, args.concurrency))


if __name__ == "__main__":
    main()
