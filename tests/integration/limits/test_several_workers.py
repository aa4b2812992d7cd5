"""Two worker processes of one gateway (``server.workers: 2``) on one real Redis and one SQLite
store stay exact: a key's limit admits exactly its value across both, and after a graceful stop
the ledger holds exactly one row per admitted request (none for a 429) with the usage the
clients saw.

Every client connection is opened while the other worker is paused, so the test knows which
worker serves each request (tests/workerconns.py checks it in /proc). Each worker gets more
requests of a limited key than the limit admits: if each worker counted alone, the two together
would admit twice the limit. The limits refill continuously (a bucket of L per minute), so the
burst is bounded in time: with RPM = 20 one more request is admissible only 3 s after the first;
the bounds below allow what a slower burst could refill, and are exact for a burst under 3 s.
"""

from __future__ import annotations

import itertools
import math
import threading
import time
from dataclasses import dataclass
from http.client import HTTPConnection
from pathlib import Path
from typing import Any

import openai
import orjson

from gateway.tokens import TokenizerConfig, build_token_counter
from gateway.wire.request import Operation
from serve_app.procs import alive, this_proc
from tests.gatewayproc import GatewayProcess, start_gateway
from tests.integration.auth.conftest import ENV, cli
from tests.integration.limits.limitsetup import MODEL, ledger_rows, limited_config, no_delay_sim
from tests.redisserver import start_redis
from tests.simproc import SimProcess
from tests.workerconns import connect_through, worker_pids

WORKERS = 2
RPM = 20
FITS = 10  # requests whose reservations fill the token limit exactly
PER_WORKER = {"rpm": 25, "tpm": 15, "free": 3}  # chat requests of each key each worker serves
MAX_TOKENS = 100
MESSAGES = [{"role": "user", "content": "count these words, then stop"}]
CHAT, MODELS = "/v1/chat/completions", "/v1/models"


@dataclass(frozen=True)
class Call:
    conn: HTTPConnection
    path: str
    key: str
    worker: int
    request_id: str


@dataclass(frozen=True)
class Answer:
    call: Call
    status: int
    usage: dict[str, int] | None


EXTRA = {"ignore_eos": True}
"""vLLM's ``ignore_eos``: the simulator fills the cap, so each answer uses MAX_TOKENS."""


def base() -> dict[str, Any]:
    return {"model": MODEL, "messages": MESSAGES, "max_tokens": MAX_TOKENS}


def body() -> dict[str, Any]:
    return {**base(), **EXTRA}


def token_sizes(sim: SimProcess) -> tuple[int, int]:
    """What one request reserves (the gateway's own count) and what the upstream bills for it."""
    reserved = build_token_counter(TokenizerConfig()).count_request(Operation.CHAT, body())
    with openai.OpenAI(base_url=sim.base_url, api_key="x", max_retries=0) as client:
        usage = client.chat.completions.create(**base(), extra_body=EXTRA).usage
    assert usage is not None
    return reserved + MAX_TOKENS, usage.total_tokens


def make_keys(database_url: str, tpm: int) -> dict[str, dict[str, Any]]:
    """One tenant (no limits of its own) and its keys, made before the gateway starts, so both
    workers find them in the store."""
    cli(database_url, "tenants", "create", "acme")
    limits = {
        "rpm": ["--requests-per-minute", str(RPM)],
        "tpm": ["--tokens-per-minute", str(tpm)],
        "free": ["--requests-per-minute", "100000"],  # through the limiter too, never refused
    }
    return {
        name: orjson.loads(
            cli(database_url, "keys", "create", "--tenant", "acme", "--name", name, *options)
        )
        for name, options in limits.items()
    }


def pinned(
    gateway: GatewayProcess, worker: int, others: list[int], path: str, key: str, count: int
) -> list[Call]:
    conns = connect_through(gateway, worker, others, count)
    return [Call(c, path, key, worker, f"{key}-{worker}-{i}") for i, c in enumerate(conns)]


def ask(call: Call, secret: str) -> Answer:
    headers = {"Authorization": f"Bearer {secret}", "x-request-id": call.request_id}
    if call.path == CHAT:
        headers["Content-Type"] = "application/json"
        call.conn.request("POST", CHAT, orjson.dumps(body()), headers)
    else:
        call.conn.request("GET", call.path, headers=headers)
    response = call.conn.getresponse()
    answer = orjson.loads(response.read())
    call.conn.close()
    usage = answer.get("usage") if call.path == CHAT and response.status == 200 else None
    return Answer(call, response.status, usage)


def burst(calls: list[Call], secrets: dict[str, str]) -> tuple[list[Answer], float]:
    """Every call at once (one thread each, released together); the answers and the seconds from
    the release to the last answer."""
    answers: list[Answer] = []
    start = threading.Barrier(len(calls) + 1)

    def one(call: Call) -> None:
        start.wait()
        answers.append(ask(call, secrets[call.key]))

    threads = [threading.Thread(target=one, args=(c,)) for c in calls]
    for thread in threads:
        thread.start()
    start.wait()
    released = time.monotonic()
    for thread in threads:
        thread.join(60)
    assert len(answers) == len(calls)
    return answers, time.monotonic() - released


def warm_up_calls(gateway: GatewayProcess, workers: list[int]) -> list[Call]:
    """Each worker's first requests (the key lookups, the tokenizer, the Redis and store
    connections) are slow; done before the burst, so that the burst is not one worker's alone:
    every key's ``/v1/models`` (a lookup, no limit taken) and the free key's chats."""
    calls = []
    for worker in workers:
        others = [w for w in workers if w != worker]
        for key in PER_WORKER:
            calls += pinned(gateway, worker, others, MODELS, key, 1)
        calls += pinned(gateway, worker, others, CHAT, "free", PER_WORKER["free"])
    return calls


def limited_calls(gateway: GatewayProcess, workers: list[int]) -> list[Call]:
    """The limited keys' chats, interleaved across workers and keys."""
    lanes = []
    for worker in workers:
        others = [w for w in workers if w != worker]
        for key in ("rpm", "tpm"):
            lanes.append(pinned(gateway, worker, others, CHAT, key, PER_WORKER[key]))
    return [call for row in itertools.zip_longest(*lanes) for call in row if call is not None]


def wait_started(gateway: GatewayProcess, count: int, timeout: float = 30) -> None:
    """Until every worker finished its start-up (uvicorn logs it once per worker): a worker paused
    while the other still starts could be paused past uvicorn's health check."""
    deadline = time.monotonic() + timeout
    while gateway.logs().count("Application startup complete") < count:
        assert time.monotonic() < deadline, gateway.logs()
        time.sleep(0.05)


def gateway_config(sim: SimProcess, tmp_path: Path, redis_url: str) -> dict[str, Any]:
    limits = {"backend": "redis", "redis_url": redis_url, "key_prefix": "workers"}
    config = limited_config(sim.url, tmp_path, limits=limits, auth={"enabled": True})
    config["server"]["workers"] = WORKERS
    # Rows stay buffered until each worker's shutdown flush writes them.
    config["accounting"] = {"ledger_interval": 600, "ledger_batch_size": 100_000}
    return config


def test_two_workers_admit_exactly_the_limit_and_record_one_row_each(tmp_path: Path) -> None:
    with no_delay_sim() as sim, start_redis() as redis:
        reserved, billed = token_sizes(sim)
        # Each reservation runs ahead of the usage by (reserved - billed): FITS reservations fill
        # the limit, and even with every refund back first no more than FITS fit.
        assert FITS * (reserved - billed) < reserved
        tpm = FITS * reserved
        keys = make_keys(f"sqlite:///{tmp_path}/gateway.db", tpm)
        secrets = {name: issued["key"] for name, issued in keys.items()}
        with start_gateway(gateway_config(sim, tmp_path, redis.url), tmp_path, env=ENV) as gateway:
            workers = worker_pids(gateway, WORKERS)
            procs = [this_proc(w) for w in workers]
            wait_started(gateway, WORKERS)
            warm, _ = burst(warm_up_calls(gateway, workers), secrets)
            hot, elapsed = burst(limited_calls(gateway, workers), secrets)
            assert ledger_rows(tmp_path / "gateway.db") == []  # nothing written before the stop
            assert gateway.stop() == 0  # SIGTERM: both workers drain and flush, then the parent
        assert not any(p is not None and alive(p) for p in procs)

    assert all(a.status == 200 for a in warm)
    assert {a.status for a in hot} == {200, 429}
    chats = [a for a in warm + hot if a.call.path == CHAT]
    admitted = [a for a in chats if a.status == 200]
    count = {
        (key, w): sum(a.call.key == key and a.call.worker == w for a in admitted)
        for key in PER_WORKER
        for w in workers
    }
    figures = f"admitted per key and worker {count}, burst {elapsed:.2f}s"
    rpm = sum(a.call.key == "rpm" for a in admitted)
    tpm_admitted = sum(a.call.key == "tpm" for a in admitted)
    # Exactly RPM of 2 x 25 and FITS of 2 x 15; a burst slower than 60 / RPM = 3 s could have
    # refilled more, and the upper bounds say how many.
    assert RPM <= rpm <= RPM + math.floor(RPM * elapsed / 60), figures
    refilled = tpm * elapsed / 60
    assert FITS <= tpm_admitted <= math.floor(((FITS - 1) * reserved + refilled) / billed) + 1
    assert all(count["free", w] == PER_WORKER["free"] for w in workers), figures
    assert all(a.usage is not None and a.usage["total_tokens"] == billed for a in admitted)

    # One row per admitted request, none for a 429, each with the usage its client saw.
    rows = ledger_rows(tmp_path / "gateway.db")
    seen = {a.call.request_id: a for a in admitted}
    assert sorted(r["correlation_id"] for r in rows) == sorted(seen), figures
    key_ids = {name: issued["id"] for name, issued in keys.items()}
    for row in rows:
        answer = seen[row["correlation_id"]]
        assert answer.usage is not None
        assert row["key_id"] == key_ids[answer.call.key] and row["tenant_id"] == "acme"
        assert row["status"] == 200 and not row["partial"]
        assert row["input_tokens"] == answer.usage["prompt_tokens"]
        assert row["output_tokens"] == answer.usage["completion_tokens"]
    total = sum(r["input_tokens"] + r["output_tokens"] for r in rows)
    assert total == sum(a.usage["total_tokens"] for a in admitted if a.usage) == len(rows) * billed
