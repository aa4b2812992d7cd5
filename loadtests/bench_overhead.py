"""Overhead benchmark: direct to the simulator vs the floor proxy vs the gateway.

The upstream and the load generator share core 0; the proxy under test runs alone on core 1
(``taskset``). The upstream is the fast simulator (``fast_sim.py``, granian; ``--upstream sim``
takes the project's own simulator instead, which is slower than the floor proxy and so caps the
ratios): every ratio is only trusted when direct-to-upstream is at least 3x the floor's rate,
which the report checks. For each of non-streaming and streaming (32 content chunks) and
concurrency 1, 16 and 64, wrk measures requests/s and p50/p99 latency; a sequential aiohttp probe
at concurrency 1 measures time to first byte. Two gateways are measured: ``gateway``, the proxy
as the foundation builds it (keys, rate limits and the usage ledger off; access log and metrics
on), and ``gateway-full``, as a deployment runs it (keys checked, in-process rate limits, usage
ledger in SQLite). Then gateway-full serves 100k requests while its resident memory is sampled.

The paced case (``--paced 64,256``, ``--pace-ms 20``) is a stream as an engine sends it: a second
fast simulator sends a token every 20 ms, so a proxy reads one event a read (unpaced, it reads
several: the meter's fast path), and each proxy holds hundreds of streams open. Its figure is the
proxy's CPU time per stream (its CPU-time clock, over a window in the steady state; streams
served in it by Little's law), which a shared machine's load moves far less than a throughput
ratio, and the added time to first byte under that load, against the floor's; the upstream's
and the load generator's shares of their core are reported beside them (the headroom).

    .venv/bin/python loadtests/bench_overhead.py [--seconds 5] [--concurrency 1,64] [--out r.json]
    .venv/bin/python loadtests/bench_overhead.py --workers 2    # scaling: every process unpinned
    .venv/bin/python loadtests/bench_overhead.py --profile DIR  # py-spy of gateway-full, per stage
    .venv/bin/python loadtests/bench_overhead.py --only-paced --paced 64,256 --pace-ms 20
    .venv/bin/python loadtests/bench_overhead.py --clients   # floor proxy: aiohttp vs httpx
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import json
import math
import os
import re
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import aiohttp
import httpx
import yaml

HERE = Path(__file__).resolve().parent
PYTHON = sys.executable
MODEL = "sim-model"
LOAD_CORE, PROXY_CORE = "0", "1"
UNPINNED = False
_UNITS = {"us": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0}


@dataclass(frozen=True)
class Target:
    url: str
    pid: int | None
    api_key: str = "none"


@dataclass
class Result:
    target: str
    mode: str
    concurrency: int
    rps: float
    p50_ms: float
    p99_ms: float
    ttfb_p50_ms: float | None = None
    ttfb_p99_ms: float | None = None
    cpu_us_per_request: float | None = None
    """The proxy's own CPU time per request: unlike requests/s, steady on a shared machine."""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_http(url: str, timeout: float = 90) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            httpx.get(url, timeout=1)
            return
        except httpx.HTTPError:
            time.sleep(0.05)
    raise TimeoutError(url)


class Processes:
    """Everything the benchmark starts, stopped by pid at the end."""

    def __init__(self) -> None:
        self.procs: list[subprocess.Popen[bytes]] = []

    def start(self, core: str, *cmd: str) -> subprocess.Popen[bytes]:
        core = "0,1" if UNPINNED else core
        proc = subprocess.Popen(
            ["taskset", "-c", core, *cmd], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL
        )
        self.procs.append(proc)
        return proc

    def stop(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGINT)
        for proc in self.procs:
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def start_sim(procs: Processes, kind: str, pace_ms: float = 0) -> str:
    """The upstream on the load core: the fast simulator (granian) or the project's simulator;
    ``pace_ms``: the fast simulator sends a token every ``pace_ms`` (``--pace-ms``)."""
    if kind == "fast" or pace_ms:
        cmd = [PYTHON, str(HERE / "fast_sim.py"), "--port", str(free_port()), "--model", MODEL]
        cmd += ["--pace-ms", str(pace_ms)] if pace_ms else []
    else:
        cmd = [PYTHON, "-m", "serve_app.sim", "--port", "0", "--no-delay", "--model", MODEL]
    proc = procs.start(LOAD_CORE, *cmd)
    assert proc.stdout is not None
    line = proc.stdout.readline().decode()
    return line.split()[-1]


def start_floor(procs: Processes, upstream: str, client: str, server: str = "uvicorn") -> Target:
    port = free_port()
    procs.start(
        PROXY_CORE,
        PYTHON,
        str(HERE / "floor_proxy.py"),
        "--upstream",
        upstream,
        "--port",
        str(port),
        "--client",
        client,
        "--server",
        server,
    )
    url = f"http://127.0.0.1:{port}"
    wait_http(url)
    return Target(url, procs.procs[-1].pid)


def gateway_config(
    port: int,
    upstream: str,
    workdir: Path,
    full: bool,
    workers: int = 1,
    serving_aware: bool = False,
) -> dict[str, object]:
    """``full``: keys, in-process rate limits (high enough never to refuse) and the usage
    ledger on, as a deployment runs; otherwise the proxy alone (what the foundation builds)."""
    config: dict[str, object] = {
        "server": {"host": "127.0.0.1", "port": port, "workers": workers, "access_log": True},
        "pools": {"sim": {"urls": [upstream]}},
        "models": {MODEL: {"pool": "sim"}},
        "storage": {"url": f"sqlite:///{workdir / 'gateway.db'}"},
    }
    if full:
        config["limits"] = {"defaults": {"requests_per_minute": 10**8, "tokens_per_minute": 10**10}}
    else:
        config["auth"] = {"enabled": False}
        config["accounting"] = {"ledger": False}
    if serving_aware:
        config.update(serving_aware_overlay(upstream))
    return config


SERVING_AWARE_ENV = "BENCH_SERVING_AWARE"


def serving_aware_overlay(upstream: str) -> dict[str, object]:
    """With ``BENCH_SERVING_AWARE=1``: every part of serving-aware routing on the hot path (the
    prefix index hashes and matches each prompt, the replica scorers, saturation bounds checked,
    the flow-control gate asked), none of it able to refuse (the bounds are never reached)."""
    return {
        "pools": {
            "sim": {
                "urls": [upstream],
                "capacity": 100_000,
                "saturation": {"max_prompt_tokens_in_flight": 10**9},
            }
        },
        "models": {MODEL: {"pool": "sim", "routing": {"prefix": {"enabled": True}}}},
        "flow": {"enabled": True},
    }


def start_gateway(
    procs: Processes,
    upstream: str,
    workdir: Path,
    full: bool,
    workers: int = 1,
    tree: Path | None = None,
) -> Target:
    """``tree``: run the gateway of another source tree (a git worktree of an older commit):
    its folder is the working directory and PYTHONPATH, so ``python -m gateway`` is its code."""
    port = free_port()
    workdir = workdir / str(port)
    workdir.mkdir()
    path = workdir / "gateway.yaml"
    # Serving-aware routing only for this tree's gateways: an older tree refuses its keys.
    aware = tree is None and os.environ.get(SERVING_AWARE_ENV) == "1"
    config = gateway_config(port, upstream, workdir, full, workers, aware)
    path.write_text(yaml.safe_dump(config))
    env = os.environ if tree is None else {**os.environ, "PYTHONPATH": _path_with(tree)}
    key = bootstrap_key(path, env, tree) if full else "none"
    command = [PYTHON, "-m", "gateway", "run", "--config", str(path)]
    log = (workdir / f"gateway-{port}.log").open("wb")
    proc = subprocess.Popen(
        [
            "taskset",
            "-c",
            PROXY_CORE if workers == 1 and not UNPINNED else "0,1",
            *command,
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
        env=env,
        cwd=tree,
    )
    procs.procs.append(proc)
    url = f"http://127.0.0.1:{port}"
    wait_http(url + "/healthz")
    return Target(url, proc.pid, key)


def _path_with(tree: Path) -> str:
    """PYTHONPATH with ``tree`` first: its ``gateway`` package shadows this one, and whatever
    the environment put there (a folder of dependencies) is still found."""
    return os.pathsep.join(p for p in (str(tree), os.environ.get("PYTHONPATH", "")) if p)


def bootstrap_key(config: Path, env: os._Environ[str] | dict[str, str], tree: Path | None) -> str:
    cli = [PYTHON, "-m", "gateway"]
    subprocess.run(
        [*cli, "tenants", "create", "--config", str(config), "bench"],
        check=True,
        capture_output=True,
        env=env,
        cwd=tree,
    )
    return subprocess.run(
        [
            *cli,
            "keys",
            "create",
            "--config",
            str(config),
            "--tenant",
            "bench",
            "--name",
            "bench",
            "--print-secret-only",
        ],
        check=True,
        capture_output=True,
        text=True,
        env=env,
        cwd=tree,
    ).stdout.strip()


def wrk(
    url: str, concurrency: int, seconds: float, stream: bool, api_key: str = "none"
) -> tuple[float, float, float, int]:
    """requests/s, p50 and p99 latency (ms), and the request count, from one wrk run."""
    out = subprocess.run(
        wrk_command(url, concurrency, seconds),
        capture_output=True,
        text=True,
        env=wrk_env(stream, api_key),
        check=True,
    ).stdout
    rps, p50, p99, count, _ = parse_wrk(out, url)
    return rps, p50, p99, count


def wrk_command(url: str, concurrency: int, seconds: float) -> list[str]:
    return [
        "taskset",
        "-c",
        LOAD_CORE if not UNPINNED else "0,1",
        "wrk",
        "-t1",
        f"-c{concurrency}",
        f"-d{int(seconds)}s",
        "--timeout",
        "10s",
        "--latency",
        "-s",
        str(HERE / "wrk_chat.lua"),
        url + "/v1/chat/completions",
    ]


def wrk_env(stream: bool, api_key: str) -> dict[str, str]:
    return {
        **os.environ,
        "WRK_API_KEY": api_key,
        "WRK_STREAM": "1" if stream else "0",
        "WRK_MAX_TOKENS": "32" if stream else "16",
    }


def parse_wrk(out: str, url: str) -> tuple[float, float, float, int, float]:
    """requests/s, p50 and p99 latency (ms), the request count and the mean latency (ms)."""
    if "Non-2xx" in out:
        raise RuntimeError(f"errors from {url}:\n{out}")
    rps = float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1))  # type: ignore[union-attr]
    count = int(re.search(r"(\d+) requests in", out).group(1))  # type: ignore[union-attr]
    mean = re.search(r"Latency\s+([\d.]+\w+)", out).group(1)  # type: ignore[union-attr]
    pct = dict(re.findall(r"^\s+(\d+)%\s+([\d.]+\w+)", out, re.M))
    return rps, _ms(pct["50"]), _ms(pct["99"]), count, _ms(mean)


def _ms(text: str) -> float:
    number, unit = re.fullmatch(r"([\d.]+)(\w+)", text).groups()  # type: ignore[union-attr]
    return float(number) * _UNITS[unit] * 1000


async def probe_ttfb(
    url: str, stream: bool, requests: int, api_key: str = "none"
) -> tuple[float, float, float, float]:
    """Sequential requests: p50/p99 time to first body byte and p50/p99 total (ms)."""
    body = {
        "model": MODEL,
        "messages": [{"role": "user", "content": "Say hello to the simulator, please."}],
        "max_tokens": 32 if stream else 16,
        "stream": stream,
    }
    ttfb, total = [], []
    headers = {"authorization": "Bearer " + api_key}
    async with aiohttp.ClientSession(headers=headers) as session:
        for i in range(requests + 50):
            start = time.perf_counter()
            async with session.post(url + "/v1/chat/completions", json=body) as response:
                await response.content.readany()
                first = time.perf_counter()
                await response.read()
                end = time.perf_counter()
            if i >= 50:  # warm-up
                ttfb.append((first - start) * 1000)
                total.append((end - start) * 1000)
    q = lambda xs, p: statistics.quantiles(xs, n=100)[p - 1]  # noqa: E731
    return q(ttfb, 50), q(ttfb, 99), q(total, 50), q(total, 99)


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError("no VmRSS")


def cpu_seconds(pid: int) -> float:
    """CPU time of ``pid`` and its live descendants (uvicorn's worker processes)."""
    return sum(process_cpu(proc) for proc in [pid, *descendants(pid)])


def process_cpu(pid: int) -> float:
    """A process's CPU time, every thread's, as the scheduler accounts it: its CPU-time clock
    (``clock_getcpuclockid``: nanoseconds of run time). ``/proc/PID/stat``'s utime and stime
    count clock ticks (10 ms here), coarse for a paced cell's window, in which a proxy runs for
    a few tenths of a second in bursts of a fraction of a tick. The tick counts remain the
    fallback where the clock cannot be read (another user's process)."""
    clock = (~pid << 3) | 2  # MAKE_PROCESS_CPUCLOCK(pid, CPUCLOCK_SCHED), as glibc builds it
    try:
        return time.clock_gettime(clock)
    except OSError:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime + stime


def descendants(pid: int) -> list[int]:
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except OSError:
                continue
            children.setdefault(ppid, []).append(int(entry.name))
    found, todo = [], list(children.get(pid, ()))
    while todo:
        child = todo.pop()
        found.append(child)
        todo.extend(children.get(child, ()))
    return found


def run_matrix(
    targets: dict[str, Target],
    seconds: float,
    probes: int,
    concurrencies: list[int],
    rounds: int = 1,
) -> list[Result]:
    """Every cell for every target in turn, ``rounds`` times; each cell's median round (by CPU
    per request, else requests/s). Interleaving keeps a shared machine's drifting load about
    equal for every target."""
    results = []
    for stream in (False, True):
        mode = "stream" if stream else "json"
        for concurrency in concurrencies:
            runs: dict[str, list[Result]] = {name: [] for name in targets}
            for _ in range(rounds):
                for name, target in targets.items():
                    runs[name].append(one_cell(name, target, mode, concurrency, seconds, probes))
            for cell in runs.values():
                cell.sort(key=lambda r: r.cpu_us_per_request or -r.rps)
                results.append(cell[len(cell) // 2])
                print(json.dumps(asdict(cell[len(cell) // 2])), file=sys.stderr)
    return results


def one_cell(
    name: str, target: Target, mode: str, concurrency: int, seconds: float, probes: int
) -> Result:
    stream = mode == "stream"
    try:
        wrk(target.url, concurrency, 1, stream, target.api_key)  # warm-up: pools, caches
    except RuntimeError as err:
        raise RuntimeError(f"{name}, {mode}, concurrency {concurrency}: {err}") from None
    cpu_before = cpu_seconds(target.pid) if target.pid else 0.0
    rps, p50, p99, count = wrk(target.url, concurrency, seconds, stream, target.api_key)
    result = Result(name, mode, concurrency, rps, p50, p99)
    if target.pid:
        result.cpu_us_per_request = (cpu_seconds(target.pid) - cpu_before) / count * 1e6
    if concurrency == 1 and probes:
        t50, t99, _, _ = asyncio.run(probe_ttfb(target.url, stream, probes, target.api_key))
        result.ttfb_p50_ms, result.ttfb_p99_ms = t50, t99
    return result


@dataclass
class PacedResult:
    """One paced cell: ``concurrency`` streams held open, each a token every ``pace_ms``."""

    target: str
    concurrency: int
    pace_ms: float
    streams_per_s: float
    """Little's law over the window: the streams held open over wrk's mean stream duration."""
    stream_ms: float
    ttfb_p50_ms: float
    ttfb_p99_ms: float
    cpu_us_per_stream: float | None
    """The proxy's own CPU (its CPU-time clock) in the window, per stream served in it."""
    proxy_core: float | None
    """The proxy's share of its core in the window: near 1 it is saturated and pacing slips."""
    upstream_core: float
    loadgen_core: float
    """wrk's and the TTFB probe's shares of the load core (beside the upstream's)."""
    x_floor: tuple[float, float, float] | None = None
    """CPU per stream over the floor's of the same round: the median, lowest and highest of the
    rounds. The machine's speed drifts between rounds (the floor's own figure moved by 70%
    between runs on the 2-core VM); a round's target and floor run a few seconds apart, so their
    ratio carries less of the drift than the ratio of two medians taken from different rounds."""


def paced_cell(
    name: str, target: Target, sim_pid: int, concurrency: int, seconds: float, pace_ms: float
) -> PacedResult:
    """``concurrency`` paced streams: wrk holds most of them, a few probe connections measure
    the time to the first body byte of theirs. CPU is read over a window in the steady state
    (after every connection has had a whole stream, before wrk stops and cuts streams off), so
    the streams starting and the ones cut at the end do not count."""
    stream_s = 32 * pace_ms / 1000  # 31 gaps, plus the proxies' and the probes' own time
    wrk(target.url, concurrency, max(1, round(2 * stream_s)), True, target.api_key)  # warm-up
    return asyncio.run(_paced(name, target, sim_pid, concurrency, seconds, pace_ms, stream_s))


async def _paced(
    name: str,
    target: Target,
    sim_pid: int,
    concurrency: int,
    seconds: float,
    pace_ms: float,
    stream_s: float,
) -> PacedResult:
    probes = max(1, min(16, concurrency // 8))
    seconds = math.ceil(max(seconds, 4 * stream_s + 2))  # wrk runs whole seconds
    load = await asyncio.create_subprocess_exec(
        *wrk_command(target.url, concurrency - probes, seconds),
        stdout=asyncio.subprocess.PIPE,
        env=wrk_env(True, target.api_key),
    )
    stop_at = time.perf_counter() + seconds - stream_s - 0.5
    ttfb: list[float] = []
    headers = {"authorization": "Bearer " + target.api_key}
    async with aiohttp.ClientSession(headers=headers) as session:
        workers = [
            asyncio.create_task(_probe_streams(session, target.url, stop_at, ttfb))
            for _ in range(probes)
        ]
        await asyncio.sleep(1.5 * stream_s + 0.5)  # every connection past its first stream
        before = _paced_counters(target.pid, sim_pid, load.pid)
        await asyncio.sleep(seconds - 2.5 * stream_s - 1.5)  # ends before wrk cuts streams
        after = _paced_counters(target.pid, sim_pid, load.pid)
        await asyncio.gather(*workers)
    out, _ = await load.communicate()
    _, _, _, _, mean_ms = parse_wrk(out.decode(), target.url)
    wall = after[0] - before[0]
    streams = wall * concurrency / (mean_ms / 1000)
    proxy = after[1] - before[1] if target.pid else None
    q = statistics.quantiles(ttfb, n=100)
    return PacedResult(
        name,
        concurrency,
        pace_ms,
        streams / wall,
        mean_ms,
        q[49],
        q[98],
        None if proxy is None else proxy / streams * 1e6,
        None if proxy is None else proxy / wall,
        (after[2] - before[2]) / wall,
        (after[3] - before[3]) / wall,
    )


def _paced_counters(proxy: int | None, sim: int, load: int) -> tuple[float, float, float, float]:
    """Wall clock, then CPU seconds of the proxy, the upstream, and wrk plus this process."""
    import resource

    own = resource.getrusage(resource.RUSAGE_SELF)
    return (
        time.perf_counter(),
        cpu_seconds(proxy) if proxy else 0.0,
        cpu_seconds(sim),
        cpu_seconds(load) + own.ru_utime + own.ru_stime,
    )


async def _probe_streams(
    session: aiohttp.ClientSession, url: str, stop_at: float, ttfb: list[float]
) -> None:
    """Streams one after another on one connection until ``stop_at``; notes each one's time
    to its first body byte (ms)."""
    body = {
        "model": MODEL,
        "messages": [{"role": "user", "content": "Say hello to the simulator, please."}],
        "max_tokens": 32,
        "stream": True,
    }
    while time.perf_counter() < stop_at:
        start = time.perf_counter()
        async with session.post(url + "/v1/chat/completions", json=body) as response:
            await response.content.readany()
            ttfb.append((time.perf_counter() - start) * 1000)
            await response.read()


def run_paced(
    targets: dict[str, Target],
    sim_pid: int,
    concurrencies: list[int],
    seconds: float,
    pace_ms: float,
    rounds: int,
) -> list[PacedResult]:
    """Every paced cell for every target in turn, ``rounds`` times; each cell's median round
    by CPU per stream (the direct cell's by its TTFB), with its rounds' ratios to the floor."""
    results = []
    for concurrency in concurrencies:
        runs: dict[str, list[PacedResult]] = {name: [] for name in targets}
        for _ in range(rounds):
            for name, target in targets.items():
                runs[name].append(paced_cell(name, target, sim_pid, concurrency, seconds, pace_ms))
        floors = runs.get("floor")
        for cell in runs.values():
            ratios = _round_ratios(cell, floors)
            cell.sort(key=lambda r: r.cpu_us_per_stream or r.ttfb_p50_ms)
            median = replace(cell[len(cell) // 2], x_floor=ratios)
            results.append(median)
            print(json.dumps(asdict(median)), file=sys.stderr)
    return results


def _round_ratios(
    cell: list[PacedResult], floors: list[PacedResult] | None
) -> tuple[float, float, float] | None:
    """The median, lowest and highest of a cell's CPU per stream over its round's floor."""
    if floors is None:
        return None
    ratios = [
        r.cpu_us_per_stream / f.cpu_us_per_stream
        for r, f in zip(cell, floors, strict=True)
        if r.cpu_us_per_stream and f.cpu_us_per_stream
    ]
    if not ratios:
        return None
    return statistics.median(ratios), min(ratios), max(ratios)


def paced_report(results: list[PacedResult]) -> str:
    by = {(r.target, r.concurrency): r for r in results}
    lines = [
        "| paced streams | target | streams/s | stream ms | TTFB p50 ms | added TTFB p50 ms "
        "| CPU us/stream | x floor (rounds) | proxy core | upstream core | load generator core |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in results:
        direct = by.get(("direct", r.concurrency), r)
        floor = by.get(("floor", r.concurrency))
        added = r.ttfb_p50_ms - direct.ttfb_p50_ms
        cpu = f"{r.cpu_us_per_stream:.0f}" if r.cpu_us_per_stream else ""
        ratio = ""
        if r.x_floor is not None and r.target != "floor":
            median, low, high = r.x_floor
            ratio = f"{median:.2f}x ({low:.2f}-{high:.2f})" if low != high else f"{median:.2f}x"
        elif floor and floor.cpu_us_per_stream and r.cpu_us_per_stream:
            ratio = f"{r.cpu_us_per_stream / floor.cpu_us_per_stream:.2f}x"
        core = f"{r.proxy_core:.0%}" if r.proxy_core is not None else ""
        floor_added = floor.ttfb_p50_ms - direct.ttfb_p50_ms if floor else None
        added_text = f"{added:.3f}"
        if floor_added and r.target not in ("direct", "floor") and floor_added > 0:
            added_text += f" ({added / floor_added:.2f}x)"
        lines.append(
            f"| {r.concurrency} x {r.pace_ms:g} ms | {r.target} | {r.streams_per_s:,.0f} | "
            f"{r.stream_ms:.0f} | {r.ttfb_p50_ms:.3f} | {added_text} | {cpu} | {ratio} | "
            f"{core} | {r.upstream_core:.0%} | {r.loadgen_core:.0%} |"
        )
    lines.append("")
    for r in results:
        direct = by.get(("direct", r.concurrency))
        if direct is not None and r.stream_ms > 1.1 * direct.stream_ms:
            lines.append(
                f"SLIPPED: {r.target} at {r.concurrency} streams took {r.stream_ms:.0f} ms a "
                f"stream (direct {direct.stream_ms:.0f}): it fell behind the pace, so it read "
                "several events a read and its CPU per stream is not the one-event-a-read figure"
            )
    return "\n".join(lines)


def memory_run(target: Target, total: int) -> list[tuple[int, float]]:
    pid = target.pid
    assert pid is not None
    samples = [(0, rss_mb(pid))]
    served = 0
    while served < total:
        _, _, _, count = wrk(target.url, 64, 5, False, target.api_key)
        served += count
        samples.append((served, rss_mb(pid)))
    return samples


def clock_line() -> str:
    """The machine's clock source and what one reading costs: every request reads the clock
    several times (gateway-full more than the bare gateway: limits, key ages, ledger times), and
    a clock source without a vDSO path (not ``tsc``/``kvm-clock``) turns each reading into a
    system call, which these figures would then carry."""
    path = Path("/sys/devices/system/clocksource/clocksource0/current_clocksource")
    source = path.read_text().strip() if path.exists() else "unknown"
    costs = []
    for name, read in (("time.time", time.time), ("time.perf_counter", time.perf_counter)):
        n = 200_000
        started = time.perf_counter()
        for _ in range(n):
            read()
        costs.append(f"{name}() {(time.perf_counter() - started) / n * 1e9:.0f} ns")
    return f"Clock source: {source}; one reading: " + ", ".join(costs)


def report(results: list[Result], memory: list[tuple[int, float]]) -> str:
    by = {(r.target, r.mode, r.concurrency): r for r in results}
    lines = [
        "| mode | conc | target | req/s | p50 ms | p99 ms | TTFB p50 ms | added p50 ms "
        "| added TTFB ms | % of floor req/s | CPU us/req | floor CPU / CPU |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in results:
        direct = by.get(("direct", r.mode, r.concurrency), r)
        floor = by.get(("floor", r.mode, r.concurrency))
        added = r.p50_ms - direct.p50_ms
        added_ttfb = (
            f"{r.ttfb_p50_ms - direct.ttfb_p50_ms:.3f}"
            if r.ttfb_p50_ms is not None and direct.ttfb_p50_ms is not None
            else ""
        )
        share = f"{100 * r.rps / floor.rps:.0f}%" if floor and r.target != "direct" else ""
        ttfb = f"{r.ttfb_p50_ms:.3f}" if r.ttfb_p50_ms is not None else ""
        cpu = f"{r.cpu_us_per_request:.0f}" if r.cpu_us_per_request else ""
        efficiency = (
            f"{100 * floor.cpu_us_per_request / r.cpu_us_per_request:.0f}%"
            if floor and floor.cpu_us_per_request and r.cpu_us_per_request
            else ""
        )
        lines.append(
            f"| {r.mode} | {r.concurrency} | {r.target} | {r.rps:,.0f} | {r.p50_ms:.3f} | "
            f"{r.p99_ms:.3f} | {ttfb} | {added:.3f} | {added_ttfb} | {share} | {cpu} | "
            f"{efficiency} |"
        )
    lines.append("")
    for (target, mode, concurrency), r in by.items():
        floor = by.get(("floor", mode, concurrency))
        if target == "direct" and floor is not None:
            headroom = r.rps / floor.rps
            verdict = "ok" if headroom >= 3 else "TOO LOW: the ratios measure the upstream"
            lines.append(
                f"Upstream + load generator headroom, {mode} c{concurrency}: "
                f"{headroom:.1f}x the floor ({verdict})"
            )
    if memory:
        lines.append("")
        lines.append(
            "Gateway RSS (MB) by requests served: "
            + ", ".join(f"{n:,}: {m:.1f}" for n, m in memory)
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=5)
    parser.add_argument("--probes", type=int, default=1000, help="sequential TTFB probe requests")
    parser.add_argument("--memory-requests", type=int, default=100_000)
    parser.add_argument("--clients", action="store_true", help="compare upstream clients instead")
    parser.add_argument("--out", type=Path)
    parser.add_argument("--upstream", choices=["fast", "sim"], default="fast")
    parser.add_argument("--concurrency", default="1,16,64", help="comma-separated")
    parser.add_argument(
        "--targets", default="direct,floor,gateway,gateway-full", help="comma-separated"
    )
    parser.add_argument(
        "--workers",
        type=int,
        default=1,
        help="gateway workers; above 1 nothing is pinned (the machine has 2 cores)",
    )
    parser.add_argument(
        "--profile", type=Path, help="instead of the matrix: py-spy of --profile-target into DIR"
    )
    parser.add_argument(
        "--profile-target", choices=["floor", "gateway", "gateway-full"], default="gateway-full"
    )
    parser.add_argument(
        "--profile-tree", type=Path, help="profile the gateway of another source tree"
    )
    parser.add_argument(
        "--profile-concurrency", type=int, default=64, help="the profile's wrk connections"
    )
    parser.add_argument(
        "--tree",
        action="append",
        default=[],
        metavar="LABEL=PATH",
        help="also measure the gateways of another source tree (a worktree of an older commit)",
    )
    parser.add_argument("--rounds", type=int, default=1, help="each cell's median of N rounds")
    parser.add_argument(
        "--paced",
        default="64,256",
        help="the paced case's concurrent streams, comma-separated ('' for none)",
    )
    parser.add_argument("--pace-ms", type=float, default=20, help="the paced case's token gap")
    parser.add_argument("--paced-seconds", type=float, default=6, help="each paced cell's run")
    parser.add_argument("--only-paced", action="store_true", help="the paced case alone")
    parser.add_argument(
        "--scaling",
        action="store_true",
        help="the bare gateway with 1 and with 2 workers, nothing pinned (both cores shared)",
    )
    parser.add_argument(
        "--granian", action="store_true", help="also the floor on granian's ASGI server"
    )
    args = parser.parse_args()
    global UNPINNED
    UNPINNED = args.workers > 1 or args.scaling
    if not UNPINNED:  # the TTFB probes run here: beside the upstream, away from the proxy
        os.sched_setaffinity(0, {int(LOAD_CORE)})
    procs = Processes()
    try:
        sim = start_sim(procs, args.upstream)
        wait_http(sim + "/health")
        if args.clients:
            compare_clients(procs, sim, args.seconds)
            return
        with tempfile.TemporaryDirectory() as tmp:
            if args.profile:
                profiled = functools.partial(
                    profile_target, procs, Path(tmp), args.profile_target, args.profile_tree
                )
                if not args.only_paced:
                    profile(profiled(sim), args.profile, args.seconds, args.profile_concurrency)
                if args.paced:
                    paced_sim = start_sim(procs, "fast", args.pace_ms)
                    wait_http(paced_sim + "/health")
                    streams = max(int(c) for c in args.paced.split(","))
                    profile_paced(
                        profiled(paced_sim), args.profile, args.seconds, streams, args.pace_ms
                    )
                return
            wanted = args.targets.split(",")
            trees = [
                ("", None),
                *((t.split("=", 1)[0] + ":", Path(t.split("=", 1)[1])) for t in args.tree),
            ]
            results: list[Result] = []
            memory: list[tuple[int, float]] = []
            if not args.only_paced:
                targets = start_targets(procs, sim, Path(tmp), wanted, trees, args)
                concurrencies = [int(c) for c in args.concurrency.split(",")]
                results = run_matrix(targets, args.seconds, args.probes, concurrencies, args.rounds)
                memory = (
                    memory_run(targets["gateway-full"], args.memory_requests)
                    if args.memory_requests and "gateway-full" in targets
                    else []
                )
            paced: list[PacedResult] = []
            if args.paced:
                paced_sim = start_sim(procs, "fast", args.pace_ms)
                wait_http(paced_sim + "/health")
                sim_pid = procs.procs[-1].pid
                paced_targets = start_targets(procs, paced_sim, Path(tmp), wanted, trees, args)
                paced_concurrency = [int(c) for c in args.paced.split(",")]
                paced = run_paced(
                    paced_targets,
                    sim_pid,
                    paced_concurrency,
                    args.paced_seconds,
                    args.pace_ms,
                    args.rounds,
                )
        text = report(results, memory) if results else ""
        if paced:
            text += "\n\n" + paced_report(paced)
        print(text + "\n\n" + clock_line())
        if args.out:
            args.out.write_text(
                json.dumps(
                    {
                        "results": [asdict(r) for r in results],
                        "memory": memory,
                        "paced": [asdict(r) for r in paced],
                    },
                    indent=1,
                )
            )
    finally:
        procs.stop()


def start_targets(
    procs: Processes,
    sim: str,
    tmp: Path,
    wanted: list[str],
    trees: list[tuple[str, Path | None]],
    args: argparse.Namespace,
) -> dict[str, Target]:
    """Direct, the floor and the gateways (this tree's and each ``--tree``'s) in front of
    ``sim``."""
    targets: dict[str, Target] = {"direct": Target(sim, None)}
    if "floor" in wanted:
        targets["floor"] = start_floor(procs, sim, "aiohttp")
    if args.scaling:
        for workers in (1, 2):
            targets[f"gateway-{workers}w"] = start_gateway(procs, sim, tmp, False, workers)
    for label, tree in trees:
        for name, full in (("gateway", False), ("gateway-full", True)):
            if name in wanted:
                targets[label + name] = start_gateway(procs, sim, tmp, full, args.workers, tree)
    if args.granian:
        targets["granian-floor"] = start_floor(procs, sim, "aiohttp", "granian")
    return targets


def profile_target(
    procs: Processes, tmp: Path, name: str, tree: Path | None, upstream: str
) -> Target:
    """The one proxy a profile samples: the floor, the bare gateway or gateway-full (of
    ``tree``, another source tree, when given)."""
    if name == "floor":
        return start_floor(procs, upstream, "aiohttp")
    return start_gateway(procs, upstream, tmp, name == "gateway-full", tree=tree)


def profile(target: Target, out: Path, seconds: float, concurrency: int = 64) -> None:
    """py-spy samples of the gateway under wrk at ``concurrency``, JSON then SSE, as collapsed
    stacks (``stage_breakdown.py`` sorts them into the pipeline's stages); plus the CPU time per
    request of the same run, to turn shares into microseconds."""
    url, pid = target.url, target.pid
    assert pid is not None
    out.mkdir(parents=True, exist_ok=True)
    for stream in (False, True):
        mode = "stream" if stream else "json"
        wrk(url, concurrency, 2, stream, target.api_key)
        spy = _py_spy(pid, seconds, out / f"{mode}.txt")
        time.sleep(0.5)
        cpu_before = cpu_seconds(pid)
        rps, _, _, count = wrk(url, concurrency, seconds - 1, stream, target.api_key)
        cpu = (cpu_seconds(pid) - cpu_before) / count * 1e6
        spy.wait()
        (out / f"{mode}.json").write_text(json.dumps({"rps": rps, "cpu_us_per_request": cpu}))
        print(f"{mode}: {rps:,.0f} req/s, {cpu:.0f} CPU us/req, stacks in {out}/{mode}.txt")


def profile_paced(
    target: Target, out: Path, seconds: float, concurrency: int, pace_ms: float
) -> None:
    """py-spy samples of the gateway relaying ``concurrency`` paced streams (one event a read),
    as ``paced.txt``; the CPU per stream of the same window (Little's law, as in the paced
    cells) as ``paced.json``."""
    pid = target.pid
    assert pid is not None
    out.mkdir(parents=True, exist_ok=True)
    stream_s = 32 * pace_ms / 1000
    wrk(target.url, concurrency, max(1, round(2 * stream_s)), True, target.api_key)
    settle = 1.5 * stream_s + 0.5
    load = subprocess.Popen(
        wrk_command(target.url, concurrency, math.ceil(settle + seconds + 1)),
        stdout=subprocess.PIPE,
        text=True,
        env=wrk_env(True, target.api_key),
    )
    time.sleep(settle)
    start, cpu_before = time.perf_counter(), cpu_seconds(pid)
    spy = _py_spy(pid, seconds, out / "paced.txt")
    spy.wait()
    wall, cpu = time.perf_counter() - start, cpu_seconds(pid) - cpu_before
    output, _ = load.communicate()
    mean_ms = parse_wrk(output, target.url)[4]
    streams = wall * concurrency / (mean_ms / 1000)
    per_stream = cpu / streams * 1e6
    (out / "paced.json").write_text(
        json.dumps({"rps": streams / wall, "cpu_us_per_request": per_stream})
    )
    print(
        f"paced: {concurrency} streams, {streams / wall:,.0f} streams/s, "
        f"{per_stream:.0f} CPU us/stream, stacks in {out}/paced.txt"
    )


def _py_spy(pid: int, seconds: float, output: Path) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [
            str(Path(PYTHON).parent / "py-spy"),
            "record",
            "--pid",
            str(pid),
            "--rate",
            "250",
            "--format",
            "raw",
            "--duration",
            str(int(seconds)),
            "--output",
            str(output),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


def compare_clients(procs: Processes, sim: str, seconds: float) -> None:
    print("| client | mode | conc | req/s | p50 ms | p99 ms |\n|---|---|---|---|---|---|")
    for client in ("aiohttp", "httpx-aiohttp", "httpx"):
        url = start_floor(procs, sim, client).url
        for stream in (False, True):
            for concurrency in (1, 64):
                wrk(url, concurrency, 1, stream)
                rps, p50, p99, _ = wrk(url, concurrency, seconds, stream)
                mode = "stream" if stream else "json"
                print(f"| {client} | {mode} | {concurrency} | {rps:,.0f} | {p50:.3f} | {p99:.3f} |")


if __name__ == "__main__":
    main()
