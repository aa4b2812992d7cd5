"""TTFT and inter-token latency of streamed chat completions, per model and prompt length.

A small measuring client for the local profiles (CPU or GPU): for each model (through the
gateway: ``tiny-pd`` and ``tiny-colocated`` pin the PD and colocated pools), each prompt length
and each concurrency, it streams ``--requests`` chat completions of exactly ``--max-tokens``
tokens (``ignore_eos``, a vLLM extension) and reports p50/p90 of the time to the first content
token (TTFT) and of the mean gap between later tokens (ITL) as a Markdown table, plus JSON::

    python loadtests/ttft_itl.py --base-url http://127.0.0.1:8080/v1 --api-key sk-... \\
        --model tiny-pd --model tiny-colocated --prompt-tokens 32 --prompt-tokens 1024 \\
        --concurrency 1 --concurrency 8 --requests 32 --json results.json

Every prompt starts with a fresh nonce, so no prefix cache (colocated, prefill or decode)
serves any of its blocks: each request pays its whole prefill, and PD its whole KV transfer.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import statistics
import time
import uuid
from dataclasses import asdict, dataclass
from pathlib import Path

import aiohttp

# About two tokens per word with the tiny model's byte-level BPE (trained on Python's sources).
_WORDS = [
    "the",
    "quick",
    "brown",
    "fox",
    "jumps",
    "over",
    "the",
    "lazy",
    "dog",
    "while",
    "prefill",
    "builds",
    "the",
    "cache",
]


def prompt_of(tokens: int) -> str:
    words = [_WORDS[i % len(_WORDS)] for i in range(max(1, (tokens - 16) // 2))]
    return f"{uuid.uuid4().hex} " + " ".join(words)


@dataclass
class Sample:
    ttft: float
    itl: float | None
    tokens: int
    pool: str


@dataclass
class Row:
    model: str
    prompt_tokens: int
    concurrency: int
    requests: int
    pool: str
    prompt_tokens_seen: int
    ttft_p50_ms: float
    ttft_p90_ms: float
    itl_p50_ms: float
    itl_p90_ms: float
    output_tokens_mean: float


async def one(
    session: aiohttp.ClientSession, url: str, model: str, prompt: str, max_tokens: int
) -> tuple[Sample, int]:
    body = {
        "model": model,
        "messages": [{"role": "user", "content": prompt}],
        "max_tokens": max_tokens,
        "temperature": 0,
        "ignore_eos": True,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    start = time.perf_counter()
    stamps: list[float] = []
    prompt_tokens = 0
    async with session.post(url, json=body) as response:
        response.raise_for_status()
        pool = response.headers.get("x-gateway-pool", "-")
        async for raw in response.content:
            line = raw.decode().strip()
            if not line.startswith("data:") or line == "data: [DONE]":
                continue
            event = json.loads(line[5:])
            if event.get("usage"):
                prompt_tokens = int(event["usage"].get("prompt_tokens", 0))
            for choice in event.get("choices", []):
                if choice.get("delta", {}).get("content"):
                    stamps.append(time.perf_counter())
    if not stamps:
        raise RuntimeError(f"{model}: no content streamed")
    gaps = [b - a for a, b in itertools.pairwise(stamps)]
    itl = statistics.fmean(gaps) if gaps else None
    return Sample(stamps[0] - start, itl, len(stamps), pool), prompt_tokens


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))] * 1000


async def cell(
    session: aiohttp.ClientSession, url: str, model: str, tokens: int, conc: int, n: int, out: int
) -> Row:
    queue = list(range(n))
    samples: list[Sample] = []
    seen: list[int] = []

    async def worker() -> None:
        while queue:
            queue.pop()
            sample, prompt_tokens = await one(session, url, model, prompt_of(tokens), out)
            samples.append(sample)
            seen.append(prompt_tokens)

    await asyncio.gather(*(worker() for _ in range(conc)))
    itls = [s.itl for s in samples if s.itl is not None]
    return Row(
        model=model,
        prompt_tokens=tokens,
        concurrency=conc,
        requests=n,
        pool=",".join(sorted({s.pool for s in samples})),
        prompt_tokens_seen=round(statistics.fmean(seen)),
        ttft_p50_ms=round(_pct([s.ttft for s in samples], 0.5), 1),
        ttft_p90_ms=round(_pct([s.ttft for s in samples], 0.9), 1),
        itl_p50_ms=round(_pct(itls, 0.5), 2) if itls else 0.0,
        itl_p90_ms=round(_pct(itls, 0.9), 2) if itls else 0.0,
        output_tokens_mean=round(statistics.fmean(s.tokens for s in samples), 1),
    )


def table(rows: list[Row]) -> str:
    lines = [
        "| model (pool) | prompt tokens | concurrency | requests | TTFT p50 / p90 (ms) "
        "| ITL p50 / p90 (ms) | output tokens |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r.model} ({r.pool}) | {r.prompt_tokens_seen} | {r.concurrency} | {r.requests} "
            f"| {r.ttft_p50_ms} / {r.ttft_p90_ms} | {r.itl_p50_ms} / {r.itl_p90_ms} "
            f"| {r.output_tokens_mean} |"
        )
    return "\n".join(lines)


async def main_async(args: argparse.Namespace) -> list[Row]:
    headers = {"authorization": f"Bearer {args.api_key}"} if args.api_key else {}
    url = args.base_url.rstrip("/") + "/chat/completions"
    timeout = aiohttp.ClientTimeout(total=300)
    rows = []
    async with aiohttp.ClientSession(headers=headers, timeout=timeout) as session:
        for model in args.model:  # warm-up: first requests pay NIXL's handshake and allocations
            warm = [one(session, url, model, prompt_of(t), 8) for t in args.prompt_tokens]
            await asyncio.gather(*warm)
        for tokens in args.prompt_tokens:
            for conc in args.concurrency:
                for model in args.model:
                    row = await cell(
                        session, url, model, tokens, conc, args.requests, args.max_tokens
                    )
                    print(json.dumps(asdict(row)), flush=True)
                    rows.append(row)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--base-url", required=True, help="OpenAI base URL (…/v1)")
    parser.add_argument("--api-key", default="")
    parser.add_argument("--model", action="append", required=True)
    parser.add_argument("--prompt-tokens", type=int, action="append", required=True)
    parser.add_argument("--concurrency", type=int, action="append", default=None)
    parser.add_argument("--requests", type=int, default=32)
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    args.concurrency = args.concurrency or [1]
    rows = asyncio.run(main_async(args))
    print(table(rows))
    if args.json:
        args.json.write_text(json.dumps([asdict(r) for r in rows], indent=2))


if __name__ == "__main__":
    main()
