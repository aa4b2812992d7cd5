"""Where one tenant's time to first token goes: the gateway's queue or the engine.

bench_serving.py copies the gateway's output next to each report.json; with an overlay that sets
``server: {access_log: true}`` it holds one access-log line per request, with ``queue_ms`` and
``ttfb_ms`` but no tenant. pd-loadtest's report.json has each request's tenant, send time and
TTFT. This matches the two (a log line whose start, ``ts - latency_ms``, is within 50 ms of the
request's send time on the first request's clock, and whose ``ttfb_ms`` is within 10 ms of its
TTFT; the closest such line) and prints, for the tenant's requests, TTFT, ``queue_ms`` and
``ttfb_ms - queue_ms`` (the engine, the relay and loopback)::

    .venv/bin/python loadtests/serving_breakdown.py bench-serving/tenants/overlay/quiet-+-loud
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path
from typing import Any

CHAT = '"path":"/v1/chat/completions"'


def _log_lines(path: Path) -> list[dict[str, Any]]:
    rows = [json.loads(line) for line in path.read_text().splitlines() if CHAT in line]
    for row in rows:
        row["start"] = row["ts"] - row["latency_ms"] / 1000
    return rows


def _pct(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(p / 100 * (len(ordered) - 1)))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("folder", type=Path, help="holds report.json and gateway.log")
    parser.add_argument("--tenant", default="quiet")
    args = parser.parse_args()
    requests = json.loads((args.folder / "report.json").read_text())["requests"]
    rows = _log_lines(args.folder / "gateway.log")
    if not rows or not requests:
        raise SystemExit("no access-log lines or no requests (was server.access_log on?)")
    offset = min(r["start"] for r in rows) - min(q["sent_at"] for q in requests)
    ttft, queued, engine, unmatched = [], [], [], 0
    for q in requests:
        if q["tenant"] != args.tenant or q["ttft"] is None:
            continue
        sent = q["sent_at"] + offset
        near = [
            r
            for r in rows
            if r["ttfb_ms"] is not None
            and abs(r["start"] - sent) < 0.05
            and abs(r["ttfb_ms"] / 1000 - q["ttft"]) < 0.01
        ]
        if not near:
            unmatched += 1
            continue
        best = min(
            near, key=lambda r: abs(r["start"] - sent) + abs(r["ttfb_ms"] / 1000 - q["ttft"])
        )
        wait = best["queue_ms"] or 0.0
        ttft.append(q["ttft"] * 1000)
        queued.append(wait)
        engine.append(best["ttfb_ms"] - wait)
    if not ttft:
        raise SystemExit(f"no request of tenant {args.tenant!r} matched a log line")
    print(f"tenant {args.tenant}: {len(ttft)} requests matched, {unmatched} not")
    for name, values in (("TTFT", ttft), ("queue_ms", queued), ("ttfb_ms - queue_ms", engine)):
        print(
            f"{name}: p50 {_pct(values, 50):.0f} p90 {_pct(values, 90):.0f} "
            f"max {max(values):.0f} mean {statistics.mean(values):.0f} ms"
        )


if __name__ == "__main__":
    main()
