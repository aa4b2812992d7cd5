"""The gateway's own CPU per request, in-process, without sockets: the app built by
``create_app``, called over raw ASGI, with an upstream client that answers at once.

``bench_overhead.py`` times the gateway as a process behind sockets, where the event loop, the
kernel and the machine's drift are most of a request and move its figures by 10-25% from run to
run. This takes them out: what is left is the gateway's own Python per request (parse, auth,
admission, the prompt token count, routing, the relay and the meter, settling, the outcome, the
ledger row and its SQLite write, metrics, the access log), CPU time of the whole process (the
ledger's writer thread included), the best of several repeats. Each tree runs in its own process
(``PYTHONPATH``), the trees alternated round after round, so a change between two commits shows
as a difference between their columns::

    .venv/bin/python loadtests/bench_request.py [--requests 4000 --rounds 5]
    .venv/bin/python loadtests/bench_request.py --tree prev=<a worktree of an older commit>

The upstream answers what the fast simulator answers (``fast_sim.answers``: a JSON document, or
a 36-event stream with its usage chunk, vLLM's format); a stream reaches the gateway one event a
chunk, as an engine's paced stream does. The configs are ``bench_overhead.gateway_config``'s:
*bare* is the proxy alone, *full* adds keys, rate limits and the usage ledger.

``--pd-split`` routes the model over two pools (PD and colocated, both this upstream; the
threshold decides, every prompt here is short); ``--latency LABEL=MODE`` sets that tree's
``routing.latency.mode`` (issue 38: ``decide`` predicts every request's pools, learns every
outcome; a tree older than the setting refuses it, so name only trees that have it)::

    .venv/bin/python loadtests/bench_request.py --pd-split --latency now=decide --tree main=DIR
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator, MutableMapping, Sequence
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
CHUNKS = 32
STREAMS = {"json": False, "stream": True}


class InstantResponse:
    """The fast simulator's answer, all of it already there."""

    def __init__(self, document: bytes, events: list[bytes], stream: bool) -> None:
        self.status = 200
        self.is_event_stream = stream
        self._document = document
        self._events = events

    def relay_headers(self) -> list[tuple[bytes, bytes]]:
        kind = b"text/event-stream" if self.is_event_stream else b"application/json"
        return [(b"content-type", kind)]

    async def chunks(self) -> AsyncIterator[bytes]:
        if not self.is_event_stream:
            yield self._document
            return
        for event in self._events:  # one event a chunk: an engine's pace
            yield event

    async def read(self) -> bytes:
        return self._document

    def abort(self) -> None:
        pass

    def release(self) -> None:
        pass


class InstantUpstream:
    """An ``upstream_factory``'s client (the gateway's ``UpstreamClient`` protocol)."""

    def __init__(self, document: bytes, events: list[bytes]) -> None:
        self._document = document
        self._events = events

    async def send(self, url: str, headers: Sequence[tuple[bytes, bytes]], body: bytes) -> Any:
        stream = b'"stream":true' in body
        return InstantResponse(self._document, self._events, stream)

    async def probe(self, url: str, timeout_s: float) -> str | None:
        return None

    async def aclose(self) -> None:
        return None


def request_body(model: str, stream: bool) -> bytes:
    """wrk_chat.lua's body."""
    body = {
        "model": model,
        "messages": [{"role": "user", "content": "Say hello to the simulator, please."}],
        "max_tokens": 16,
    }
    if stream:
        body["stream"] = True
    return json.dumps(body, separators=(",", ":")).encode()


def scope(api_key: str) -> dict[str, Any]:
    return {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "POST",
        "scheme": "http",
        "path": "/v1/chat/completions",
        "raw_path": b"/v1/chat/completions",
        "query_string": b"",
        "root_path": "",
        "headers": [
            (b"host", b"127.0.0.1:8080"),
            (b"content-type", b"application/json"),
            (b"authorization", f"Bearer {api_key}".encode()),
        ],
        "client": ("127.0.0.1", 40000),
        "server": ("127.0.0.1", 8080),
    }


async def measure(config_path: Path, api_key: str, requests: int) -> dict[str, float]:
    """CPU us per request of this process's gateway, JSON and SSE (after a warm-up of each)."""
    from fast_sim import MODEL, answers

    from gateway.app import create_app
    from gateway.config import load_config

    document, events, usage = answers(CHUNKS, MODEL)
    stream_events = [*events, usage, b"data: [DONE]\n\n"]
    app = create_app(
        load_config(config_path),
        upstream_factory=lambda _pool: InstantUpstream(document, stream_events),
    )
    statuses: list[int] = []

    async def send(message: MutableMapping[str, Any]) -> None:
        if message["type"] == "http.response.start":
            statuses.append(message["status"])

    results: dict[str, float] = {}
    async with app.router.lifespan_context(app):
        ledger = app.state.gateway.accounting.ledger
        for mode, stream in STREAMS.items():
            body = request_body(MODEL, stream)
            message = {"type": "http.request", "body": body, "more_body": False}

            async def receive(message: dict[str, Any] = message) -> dict[str, Any]:
                return message

            for warm in (True, False):
                count = max(50, requests // 10) if warm else requests
                statuses.clear()
                started = time.process_time()
                for _ in range(count):
                    await app(scope(api_key), receive, send)
                if ledger is not None:  # the rows' write counted, not left to a later flush
                    await ledger.flush()
                spent = time.process_time() - started
                assert statuses == [200] * count, f"{mode}: {sorted(set(statuses))}"
            results[mode] = spent / requests * 1e6
    return results


def split(config: dict[str, Any], latency: str | None) -> dict[str, Any]:
    """The model over a PD pool and a colocated one (the same upstream); ``latency``: the
    predicted decision's mode, with the standard band's objective."""
    from fast_sim import MODEL

    pool = config["pools"]["sim"]
    config["pools"] = {"pd": dict(pool), "colocated": dict(pool)}
    routed: dict[str, Any] = {
        "variants": {"stable": {"weight": 1, "pools": {"pd": "pd", "colocated": "colocated"}}}
    }
    if latency is not None:
        routed["routing"] = {"latency": {"mode": latency}}
        config["slo"] = {"bands": {"standard": {"ttft_ms": 1000, "tpot_ms": 50}}}
    config["models"] = {MODEL: routed}
    return config


def run_tree(
    label: str,
    tree: Path | None,
    full: bool,
    requests: int,
    workdir: Path,
    pd_split: bool = False,
    latency: str | None = None,
) -> Any:
    """One measurement in a fresh process running ``tree``'s gateway (this tree's when None)."""
    import yaml
    from bench_overhead import bootstrap_key, gateway_config

    folder = Path(tempfile.mkdtemp(dir=workdir))
    config = gateway_config(8080, "http://127.0.0.1:9", folder, full)
    if pd_split:
        config = split(config, latency)
    path = folder / "gateway.yaml"
    path.write_text(yaml.safe_dump(config))
    source = tree or ROOT
    # The caller's own path after the tree's (a machine whose packages are on PYTHONPATH).
    inherited = os.environ.get("PYTHONPATH")
    search = os.pathsep.join(p for p in (str(source), str(HERE), inherited) if p)
    env = {**os.environ, "PYTHONPATH": search}
    key = bootstrap_key(path, env, tree) if full else "none"
    out = subprocess.run(
        [
            sys.executable,
            __file__,
            "--measure",
            str(path),
            "--key",
            key,
            "--requests",
            str(requests),
        ],
        check=True,
        capture_output=True,
        text=True,
        env=env,
        cwd=source,
    )
    return json.loads(out.stdout.splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=4000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--tree", action="append", default=[], metavar="LABEL=PATH")
    parser.add_argument("--measure", type=Path, help=argparse.SUPPRESS)  # the child's part
    parser.add_argument("--key", default="none", help=argparse.SUPPRESS)
    parser.add_argument("--pd-split", action="store_true", help="two pools, PD and colocated")
    parser.add_argument("--latency", action="append", default=[], metavar="LABEL=MODE")
    args = parser.parse_args()
    latency = dict(item.split("=", 1) for item in args.latency)
    if args.measure:
        os.dup2(os.open(os.devnull, os.O_WRONLY), 2)  # the access log and the server's logs
        import uvloop

        print(json.dumps(uvloop.run(measure(args.measure, args.key, args.requests))))
        return
    trees: list[tuple[str, Path | None]] = [
        ("now", None),
        *((t.split("=", 1)[0], Path(t.split("=", 1)[1])) for t in args.tree),
    ]
    samples: dict[tuple[str, str, str], list[float]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for _ in range(args.rounds):
            for label, tree in trees:
                for variant, full in (("bare", False), ("full", True)):
                    figures = run_tree(
                        label,
                        tree,
                        full,
                        args.requests,
                        Path(tmp),
                        args.pd_split,
                        latency.get(label),
                    )
                    for mode, us in figures.items():
                        samples.setdefault((label, variant, mode), []).append(us)
    print(
        f"CPU us per request, in-process, {args.requests} requests a sample, "
        f"{args.rounds} rounds (best / median); pd split: {args.pd_split}, latency: "
        f"{latency or 'off'}\n"
    )
    print("| tree | " + " | ".join(f"{v} {m}" for v in ("bare", "full") for m in STREAMS) + " |")
    print("|---" * 5 + "|")
    for label, _ in trees:
        cells = []
        for variant in ("bare", "full"):
            for mode in STREAMS:
                values = samples[(label, variant, mode)]
                cells.append(f"{min(values):.0f} / {statistics.median(values):.0f}")
        print(f"| {label} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
