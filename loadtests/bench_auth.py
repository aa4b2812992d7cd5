"""Authentication benchmark: its cost per request with the cache warm, and gateway requests/s
with auth on versus off against the simulator in no-delay mode.

Part 1 runs in this process on a real SQLite key store: the authenticator alone
(``Authenticator.tenant``), and the whole auth middleware (header scan, key parse, cache, HMAC,
context) minus the bare inner app it wraps. Part 2 runs the simulator and wrk on core 0 and one
gateway worker on core 1 (``taskset``), auth off then on (a key made with the CLI), twice each,
non-streaming, concurrency 64 and 1.

    .venv/bin/python loadtests/bench_auth.py [--calls 200000] [--seconds 5] [--skip-http]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml
from bench_overhead import LOAD_CORE, MODEL, PROXY_CORE, Processes, free_port, start_sim, wait_http
from bench_overhead import wrk as run_wrk

from gateway.auth.authenticator import Authenticator
from gateway.auth.config import AuthConfig
from gateway.auth.keys import KeyHasher
from gateway.auth.manage import KeyManager, KeySpec, TenantSpec
from gateway.auth.middleware import AuthMiddleware
from gateway.auth.store import AuthStore
from gateway.database import Database, StorageConfig
from gateway.runtime.migrations import all_migrations

HASH_SECRET = "bench-auth-hash-secret-0123456789"
ROUNDS = 3


async def _store_with_key(folder: Path) -> tuple[Database, Authenticator, str]:
    db = Database.open(StorageConfig(url=f"sqlite:///{folder}/bench.db"))
    await db.migrate(all_migrations())
    store, hasher = AuthStore(db), KeyHasher(HASH_SECRET.encode())
    manager = KeyManager(store, hasher)
    await manager.create_tenant(TenantSpec(id="bench", allowed_models=[MODEL]))
    token = (await manager.create_key("bench", KeySpec(name="bench"))).token
    return db, Authenticator(store, hasher, AuthConfig(cache_seconds=3600)), token


async def _time_per_call(call: Any, calls: int, rounds: int = 5) -> list[float]:
    """Microseconds per call, one figure per round (the minimum is the least disturbed)."""
    figures = []
    for _ in range(rounds):
        start = time.perf_counter()
        for _ in range(calls // rounds):
            await call()
        figures.append((time.perf_counter() - start) / (calls // rounds) * 1e6)
    return figures


async def micro(calls: int) -> dict[str, float]:
    with tempfile.TemporaryDirectory() as folder:
        db, auth, token = await _store_with_key(Path(folder))
        try:
            await auth.tenant(token)  # warm the cache

            async def inner(scope: Any, receive: Any, send: Any) -> None:
                return None

            middleware = AuthMiddleware(inner, authenticator=auth, public=frozenset())
            headers = [
                (b"host", b"127.0.0.1"),
                (b"content-type", b"application/json"),
                (b"authorization", f"Bearer {token}".encode()),
            ]
            scope: dict[str, Any] = {"type": "http", "path": "/v1/chat/completions"}
            scope["headers"] = headers

            async def through_middleware() -> None:
                await middleware(scope, None, None)  # type: ignore[arg-type]

            async def bare() -> None:
                await inner(scope, None, None)

            authenticator = await _time_per_call(lambda: auth.tenant(token), calls)
            with_mw = await _time_per_call(through_middleware, calls)
            without = await _time_per_call(bare, calls)
        finally:
            await db.close()
    return {
        "authenticator_us_min": min(authenticator),
        "authenticator_us_median": statistics.median(authenticator),
        "middleware_added_us_min": min(with_mw) - min(without),
        "middleware_added_us_median": statistics.median(with_mw) - statistics.median(without),
    }


def _gateway(procs: Processes, sim: str, folder: Path, auth_on: bool) -> str:
    port = free_port()
    database = f"sqlite:///{folder}/gw.db"
    config = {
        "server": {"host": "127.0.0.1", "port": port, "workers": 1, "access_log": True},
        "pools": {"sim": {"urls": [sim]}},
        "models": {MODEL: {"pool": "sim"}},
        "storage": {"url": database},
        "auth": {"enabled": auth_on},
    }
    path = folder / f"gateway-{port}.yaml"
    path.write_text(yaml.safe_dump(config))
    log = (folder / f"gateway-{port}.log").open("wb")
    proc = subprocess.Popen(
        [
            "taskset",
            "-c",
            PROXY_CORE,
            sys.executable,
            "-m",
            "gateway",
            "run",
            "--config",
            str(path),
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
        env={**os.environ, "PD_GATEWAY_KEY_HASH_SECRET": HASH_SECRET},
    )
    procs.procs.append(proc)
    url = f"http://127.0.0.1:{port}"
    wait_http(url + "/healthz")
    return url


def _cli_key(folder: Path) -> str:
    database = f"sqlite:///{folder}/gw.db"
    env = {**os.environ, "PD_GATEWAY_KEY_HASH_SECRET": HASH_SECRET}
    base = [sys.executable, "-m", "gateway"]
    subprocess.run(
        [*base, "tenants", "create", "bench", "--if-missing", "--database-url", database],
        env=env, check=True, capture_output=True,
    )  # fmt: skip
    return subprocess.run(
        [*base, "keys", "create", "--tenant", "bench", "--name", "wrk", "--print-secret-only",
         "--database-url", database],
        env=env, check=True, capture_output=True, text=True,
    ).stdout.strip()  # fmt: skip


def http(seconds: float) -> list[dict[str, Any]]:
    results: list[dict[str, Any]] = []
    procs = Processes()
    folders: list[Path] = []
    try:
        sim = start_sim(procs)
        for auth_on in (False, True) * ROUNDS:  # alternated: drifts in machine load hit both
            folder = Path(tempfile.mkdtemp(prefix="bench-auth-"))
            folders.append(folder)
            key = _cli_key(folder) if auth_on else "sk-unused"
            url = _gateway(procs, sim, folder, auth_on)
            os.environ["WRK_API_KEY"] = key  # wrk_chat.lua sends it as the Bearer key
            for concurrency in (64, 1):
                rps, p50, p99, _ = run_wrk(url, concurrency, seconds, stream=False)
                results.append(
                    {"auth": auth_on, "concurrency": concurrency, "rps": rps, "p50_ms": p50,
                     "p99_ms": p99}
                )  # fmt: skip
                print(results[-1], flush=True)
            procs.procs[-1].terminate()
            procs.procs[-1].wait(15)
    finally:
        procs.stop()
        for folder in folders:
            shutil.rmtree(folder, ignore_errors=True)
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--calls", type=int, default=200_000)
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--skip-http", action="store_true")
    args = parser.parse_args()
    print(f"load average before: {os.getloadavg()}")
    figures = asyncio.run(micro(args.calls))
    for name, value in figures.items():
        print(f"{name}: {value:.2f}")
    if args.skip_http:
        return
    results = http(args.seconds)
    print(f"\nauth  conc  req/s best of {ROUNDS}  req/s median  p50 ms (best run)")
    for auth_on in (False, True):
        for concurrency in (64, 1):
            runs = [r for r in results if r["auth"] == auth_on and r["concurrency"] == concurrency]
            best = max(runs, key=lambda r: r["rps"])
            median = statistics.median(r["rps"] for r in runs)
            label = "on " if auth_on else "off"
            print(
                f"{label}   {concurrency:>4}  {best['rps']:>15.0f}  {median:>12.0f}"
                f"  {best['p50_ms']:>8.2f}"
            )
    print(f"(load core {LOAD_CORE}, gateway core {PROXY_CORE}; load average {os.getloadavg()})")


if __name__ == "__main__":
    main()
