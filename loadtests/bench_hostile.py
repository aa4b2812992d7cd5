"""Hostile clients against a real gateway (the simulator behind it): the rows of issue 17's table
that the server's edge limits answer, re-run, with the figures to compare.

- header flood: one connection sends up to 20,000 headers of 8 KB; what was accepted, RSS growth;
- slowloris: N connections send their headers a byte every few seconds; how many the gateway
  closed and when, a normal request's latency meanwhile, open files, RSS;
- dribbled bodies (slow uploads): 5,000 connections send complete headers (Content-Length:
  100000) and dribble the body a byte every 3 s; how many the gateway closed and when, normal
  requests meanwhile (answered, within 1 s, p50, max), RSS at the peak and after they left;
- open-file limit: the gateway started with RLIMIT_NOFILE 1024, 1,124 slowloris connections;
  how many of 60 normal requests were answered within 1 s.

``--server plain`` runs the same app on stock uvicorn (httptools, no edge protocol), the "before".
``--only`` picks rows; ``--set KEY=VALUE`` overrides a ``server:`` setting (a YAML value), e.g.
``--set max_uploads_per_client=100000`` so that one address's flood meets the total cap and the
minimum rate rather than the per-client cap.

    flock /tmp/pd-heavy.lock .venv/bin/python loadtests/bench_hostile.py [--server edge|plain]
        [--slow 1000,5000] [--hold 15] [--only flood,slowloris,uploads,fd] [--set KEY=VALUE]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import yaml
from bench_overhead import MODEL, Processes, free_port, start_sim, wait_http

PYTHON = sys.executable
CHAT = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}


class Gateway:
    def __init__(self, proc: subprocess.Popen[bytes], port: int) -> None:
        self.proc, self.port, self.url = proc, port, f"http://127.0.0.1:{port}"

    def rss_mb(self) -> float:
        for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
        return 0.0

    def open_files(self) -> int:
        return len(os.listdir(f"/proc/{self.proc.pid}/fd"))


@contextmanager
def gateway(
    server: str,
    sim: str,
    workdir: Path,
    nofile: int | None = None,
    settings: dict[str, object] | None = None,
) -> Iterator[Gateway]:
    port = free_port()
    config = {
        "server": {"host": "127.0.0.1", "port": port, "access_log": False, **(settings or {})},
        "pools": {"sim": {"urls": [sim]}},
        "models": {MODEL: {"pool": "sim"}},
        "auth": {"enabled": False},
        "storage": {"url": f"sqlite:///{workdir}/gw-{port}.db"},
    }
    path = workdir / f"gw-{port}.yaml"
    path.write_text(yaml.safe_dump(config))
    if server == "edge":
        cmd = [PYTHON, "-m", "gateway", "run", "--config", str(path)]
    else:
        cmd = [
            PYTHON,
            "-m",
            "uvicorn",
            "gateway.cli:app_from_env",
            "--factory",
            "--port",
            str(port),
        ]
        cmd += ["--http", "httptools", "--loop", "uvloop", "--no-access-log"]

    def limit_files() -> None:
        if nofile is not None:
            resource.setrlimit(resource.RLIMIT_NOFILE, (nofile, nofile))

    env = {**os.environ, "PD_GATEWAY_CONFIG": str(path)}
    proc = subprocess.Popen(
        cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, preexec_fn=limit_files
    )
    try:
        wait_http(f"http://127.0.0.1:{port}/healthz")
        yield Gateway(proc, port)
    finally:
        proc.terminate()
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def normal_requests(url: str, count: int, every: float, timeout: float) -> list[float | None]:
    """Latencies in seconds of ``count`` chat requests, one every ``every`` s (None: no answer)."""
    out: list[float | None] = []
    for _ in range(count):
        started = time.perf_counter()
        try:  # a new connection each time, as a new client's would be
            answer = httpx.post(url + "/v1/chat/completions", json=CHAT, timeout=timeout)
            out.append(time.perf_counter() - started if answer.status_code == 200 else None)
        except httpx.HTTPError:
            out.append(None)
        time.sleep(every)
    return out


def in_thread(fn: Callable[[], list[float | None]]) -> Callable[[], list[float | None]]:
    result: list[list[float | None]] = []
    thread = threading.Thread(target=lambda: result.append(fn()))
    thread.start()

    def join() -> list[float | None]:
        thread.join()
        return result[0]

    return join


async def slow_client(
    port: int, head: bytes, hold: float, closed_at: list[float], started: float
) -> None:
    """Send ``head``, then a byte every 3 s until the gateway closes or ``hold`` passes."""
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
    except OSError:
        closed_at.append(-1.0)  # refused or reset at accept
        return
    try:
        writer.write(head)
        end = started + hold
        while time.monotonic() < end:
            try:
                await asyncio.wait_for(reader.read(4096), 3.0)
                closed_at.append(time.monotonic() - started)
                return
            except TimeoutError:
                writer.write(b"a")
    except OSError:
        closed_at.append(time.monotonic() - started)
    finally:
        writer.close()


async def hold_connections(port: int, n: int, head: bytes, hold: float) -> list[float]:
    closed_at: list[float] = []
    started = time.monotonic()
    tasks = []
    for i in range(n):
        tasks.append(asyncio.create_task(slow_client(port, head, hold, closed_at, started)))
        if i % 200 == 199:
            await asyncio.sleep(0.05)  # let the accept queue drain
    await asyncio.gather(*tasks)
    return closed_at


def header_flood(gw: Gateway) -> str:
    import socket

    before = gw.rss_mb()
    sent = 0
    with socket.create_connection(("127.0.0.1", gw.port), timeout=30) as sock:
        sock.sendall(b"GET /healthz HTTP/1.1\r\nhost: x\r\n")
        try:
            for _ in range(20_000):
                sock.sendall(b"x-flood: " + b"a" * 8192 + b"\r\n")
                sent += 1
            sock.sendall(b"\r\n")
            answer = sock.recv(100)
        except OSError:
            answer = b"(closed)"
    status = answer.split(b"\r\n", 1)[0].decode(errors="replace") or "(closed)"
    growth = gw.rss_mb() - before
    return f"| header flood | {sent * 8.2 / 1000:.1f} MB sent; {status} | RSS +{growth:.1f} MB |"


def slowloris(gw: Gateway, n: int, hold: float, head: bytes, label: str) -> str:
    rss0, files0 = gw.rss_mb(), gw.open_files()
    peak = {"rss": rss0, "files": files0}

    def sample() -> list[float | None]:
        return normal_requests(gw.url, 20, hold / 25, timeout=5)

    def watch() -> None:
        while not done.is_set():
            peak["rss"], peak["files"] = (
                max(peak["rss"], gw.rss_mb()),
                max(peak["files"], gw.open_files()),
            )
            time.sleep(0.5)

    done = threading.Event()
    watcher = threading.Thread(target=watch)
    watcher.start()
    join = in_thread(sample)
    closed_at = asyncio.run(hold_connections(gw.port, n, head, hold))
    latencies = join()
    done.set()
    watcher.join()
    time.sleep(3)
    answered = [x for x in latencies if x is not None]
    prompt = sum(x < 1.0 for x in answered)
    p50 = statistics.median(answered) * 1000 if answered else float("nan")
    worst = max(answered) * 1000 if answered else float("nan")
    by_gateway = [t for t in closed_at if t >= 0]
    last = f"{max(by_gateway):.1f}" if by_gateway else "-"
    return (
        f"| {label} x{n} | {len(by_gateway)}/{n} closed by the gateway (last at {last} s); "
        f"normal requests {len(answered)}/{len(latencies)} answered ({prompt} within 1 s), "
        f"p50 {p50:.0f} ms, "
        f"max {worst:.0f} ms | open files {files0} -> peak {peak['files']}; RSS {rss0:.0f} -> "
        f"peak {peak['rss']:.0f} -> after {gw.rss_mb():.0f} MB |"
    )


def fd_limit(gw: Gateway, hold: float) -> str:
    head = b"GET /healthz HTTP/1.1\r\nhost: x\r\nx-slow: "
    join = in_thread(lambda: normal_requests(gw.url, 60, hold / 70, timeout=1))
    asyncio.run(hold_connections(gw.port, 1124, head, hold))
    latencies = join()
    answered = sum(x is not None for x in latencies)
    outcome = f"{answered}/60 normal requests answered within 1 s"
    return f"| open files 1024, slowloris x1124 | {outcome} | |"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--server", choices=["edge", "plain"], default="edge")
    parser.add_argument("--slow", default="1000,5000", help="slowloris connection counts")
    parser.add_argument("--hold", type=float, default=15.0, help="seconds slowloris stays")
    parser.add_argument(
        "--body-hold", type=float, default=70.0, help="seconds dribblers stay (body_timeout 60)"
    )
    parser.add_argument("--uploads", type=int, default=5000, help="dribbled-body connections")
    parser.add_argument("--only", default="flood,slowloris,uploads,fd", help="rows to run")
    parser.add_argument("--set", action="append", default=[], help="server KEY=VALUE")
    args = parser.parse_args()
    rows_wanted = set(args.only.split(","))
    settings = {k: yaml.safe_load(v) for k, v in (item.split("=", 1) for item in args.set)}
    raise_open_files(20000)
    procs = Processes()
    rows = ["| what was sent | outcome | resources |", "|---|---|---|"]
    try:
        sim = start_sim(procs, "sim")  # the project's simulator, as before
        with tempfile.TemporaryDirectory() as folder:
            workdir = Path(folder)
            with gateway(args.server, sim, workdir, settings=settings) as gw:
                if "flood" in rows_wanted:
                    rows.append(header_flood(gw))
                for n in (int(x) for x in args.slow.split(",") if "slowloris" in rows_wanted):
                    head = b"GET /healthz HTTP/1.1\r\nhost: x\r\nx-slow: "
                    rows.append(slowloris(gw, n, args.hold, head, "slowloris"))
                body_head = (
                    b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\ncontent-type: "
                    b"application/json\r\ncontent-length: 100000\r\n\r\n{"
                )
                if "uploads" in rows_wanted:
                    row = slowloris(gw, args.uploads, args.body_hold, body_head, "dribbled body")
                    rows.append(row)
            if "fd" in rows_wanted:
                with gateway(args.server, sim, workdir, nofile=1024, settings=settings) as gw:
                    rows.append(fd_limit(gw, args.hold))
    finally:
        procs.stop()
    print(f"server: {args.server}; settings: {settings or 'defaults'}; ", end="")
    print(f"open-file limit {resource.getrlimit(resource.RLIMIT_NOFILE)[0]}")
    print("\n".join(rows))


def raise_open_files(wanted: int) -> None:
    """The benchmark's own connections need file descriptors too: the soft limit up to ``wanted``
    (or the hard limit, if lower); the gateway, started from here, inherits it."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = wanted if hard == resource.RLIM_INFINITY else min(wanted, hard)
    if soft < target:
        resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))


if __name__ == "__main__":
    main()
