"""Where the gateway's CPU goes, per pipeline stage, from py-spy's collapsed stacks.

``bench_overhead.py --profile DIR`` samples gateway-full under load with py-spy (raw format: one
line per distinct stack, ``frame;frame;...;frame COUNT``, root first) and records the CPU time per
request of the same run. Each sample is given to the stage of the deepest frame of ours it
passes through (so the upstream client's code called by the forward stage counts as forward);
samples with no stage frame go to the server (uvicorn, httptools, the event loop). Shares
times CPU us/request give microseconds per request::

    python loadtests/stage_breakdown.py DIR   # a Markdown table: JSON, SSE, SSE paced (per stream)
"""

from __future__ import annotations

import json
import re
import sys
from collections import Counter
from pathlib import Path

# (stage, pattern on "function (file:line)"), the first that matches a frame wins; frames are
# tried from the leaf up, so the deepest stage frame decides.
STAGES: list[tuple[str, re.Pattern[str]]] = [
    (stage, re.compile(pattern))
    for stage, pattern in [
        # The server's own work beneath a stage (writing the response, reading the body).
        ("server", r"^RequestResponseCycle\.(send|receive) |^HttpToolsProtocol\."),
        ("metrics", r"prometheus_client/|^observe \(gateway/proxy/record|gateway/metrics\.py"),
        ("log", r"gateway/accesslog\.py|\._log \(gateway/middleware|^outcome_fields "),
        ("ledger", r"gateway/accounting/ledger|ledger_row|aiosqlite/|sqlalchemy/|sqlite3"),
        ("settle", r"gateway/wire/usage\.py|\.settle \(|gateway/limits/memory\.py|limits/maths"),
        ("record", r"gateway/proxy/record\.py|gateway/wire/outcome\.py|gateway/telemetry/"),
        ("parse", r"gateway/wire/request\.py"),
        ("auth", r"gateway/auth/"),
        ("admit", r"gateway/accounting/stage\.py|gateway/limits/|gateway/tokens/"),
        ("route", r"gateway/runtime/table\.py|gateway/routing/(router|service|canary|pools)\.py"),
        ("route", r"(^|\.)_caller \("),
        ("relay", r"gateway/proxy/relay\.py|gateway/wire/meter\.py"),
        ("relay", r"\.(chunks|read|relay_headers|release|abort) \(gateway/upstream"),
        ("forward", r"gateway/upstream/|gateway/routing/dispatch\.py|send_via \("),
        ("forward", r"(^|\.)(_upstream_headers|_serve|_finish) \("),
        ("asgi layers", r"gateway/middleware\.py|gateway/proxy/(endpoint|pipeline)\.py|starlette/"),
        ("asgi layers", r"gateway/asgi\.py|gateway/proxy/disconnect\.py|gateway/app\.py"),
    ]
]
# The upstream client's protocol callbacks (reading answers) run from the event loop, under no
# stage frame: they count as forward through the ``gateway/upstream/`` pattern above.
LIBRARIES: list[tuple[str, re.Pattern[str]]] = []
SERVER = "server"
# The profiles ``bench_overhead.py --profile`` writes: per request, or per stream when paced.
MODES = {"json": "JSON", "stream": "SSE", "paced": "SSE paced"}
ORDER = [
    "parse",
    "auth",
    "admit",
    "route",
    "forward",
    "relay",
    "settle",
    "record",
    "ledger",
    "metrics",
    "log",
    "asgi layers",
    SERVER,
]


def stage_of(stack: list[str]) -> str:
    for frame in reversed(stack):
        for stage, pattern in STAGES:
            if pattern.search(frame):
                return stage
    for frame in reversed(stack):
        for stage, pattern in LIBRARIES:
            if pattern.search(frame):
                return stage
    return SERVER  # uvicorn, httptools, the event loop, the interpreter


# Waits py-spy samples as running (a lock wait, GIL released): aiosqlite's worker thread blocked
# on its queue (``tx.get()``, aiosqlite 0.22). Counted, they would inflate the ledger's share.
IDLE = re.compile(r"^_connection_worker_thread \(aiosqlite/core\.py:59\)$")


def shares(collapsed: str) -> dict[str, float]:
    counts: Counter[str] = Counter()
    for line in collapsed.splitlines():
        stack, _, count = line.rpartition(" ")
        if stack and not IDLE.match(stack.split(";")[-1]):
            counts[stage_of(stack.split(";"))] += int(count)
    total = sum(counts.values()) or 1
    return {stage: counts[stage] / total for stage in ORDER}


def main() -> None:
    folder = Path(sys.argv[1])
    columns = {}
    for mode in MODES:
        if (folder / f"{mode}.json").exists():
            run = json.loads((folder / f"{mode}.json").read_text())
            columns[mode] = (run, shares((folder / f"{mode}.txt").read_text()))
    print("| stage | " + " | ".join(f"{MODES[m]} us | {MODES[m]} share" for m in columns) + " |")
    print("|---" * (1 + 2 * len(columns)) + "|")
    for stage in ORDER:
        cells = []
        for run, share in columns.values():
            cells += [f"{share[stage] * run['cpu_us_per_request']:.0f}", f"{share[stage]:.0%}"]
        print(f"| {stage} | " + " | ".join(cells) + " |")
    totals = [
        f"{run['cpu_us_per_request']:.0f} | {run['rps']:,.0f}/s" for run, _ in columns.values()
    ]
    print("| total | " + " | ".join(totals) + " |")


if __name__ == "__main__":
    main()
