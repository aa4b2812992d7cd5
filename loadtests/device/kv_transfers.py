"""Per-request KV transfers from decode's log, between two marks (loadtests/device/pd-sweep.sh).

    python loadtests/device/kv_transfers.py mark LOGS_DIR MARK_FILE
    python loadtests/device/kv_transfers.py since LOGS_DIR MARK_FILE OUT_JSON

``mark`` records how far each Ray worker log has been written; ``since`` reads what was written
after that, keeps the lines ``serve_app.kv_transfer_log`` writes on decode (one per NIXL
transfer: bytes, transfer and post milliseconds, descriptors) and writes their count, sums and
percentiles, with every transfer, to OUT_JSON.
"""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path
from typing import Any

from serve_app.kv_transfer_log import MARKER, Transfer, parse_transfer_lines

_WRITER = "(Worker pid="


def _logs(logs_dir: Path) -> list[Path]:
    return sorted(logs_dir.glob("worker-*.out"))


def mark(logs_dir: Path, mark_file: Path) -> None:
    offsets = {str(p): p.stat().st_size for p in _logs(logs_dir)}
    mark_file.write_text(json.dumps(offsets))


def _own_line(line: str) -> str:
    """The line as the process that wrote it wrote it: from its ``(Worker pid=N)`` prefix on."""
    start = line.find(_WRITER)
    return line if start < 0 else line[start:]


def read_since(logs_dir: Path, mark_file: Path) -> list[Transfer]:
    """Each transfer once: vLLM's Ray executor writes a line to its worker's log, and Ray
    forwards it into the engine actor's log too (``(RayWorkerProc pid=N) (Worker pid=N) ...``),
    so the same line is kept once, however many logs it is in (the H200 run of 2026-12-02 counted
    every transfer twice before)."""
    offsets: dict[str, int] = json.loads(mark_file.read_text())
    lines: dict[str, None] = {}  # in order, each once
    for path in _logs(logs_dir):
        with path.open("rb") as log:
            log.seek(offsets.get(str(path), 0))
            text = log.read().decode(errors="replace")
        lines.update((_own_line(line), None) for line in text.splitlines() if MARKER in line)
    return parse_transfer_lines(lines)


def _quantiles(values: list[float]) -> dict[str, float | None]:
    if not values:
        return {"mean": None, "p50": None, "p90": None, "max": None}
    ordered = sorted(values)

    def at(q: float) -> float:
        return ordered[min(len(ordered) - 1, int(q * len(ordered)))]

    return {"mean": statistics.fmean(values), "p50": at(0.5), "p90": at(0.9), "max": ordered[-1]}


def summarize(transfers: list[Transfer]) -> dict[str, Any]:
    return {
        "transfers": len(transfers),
        "bytes": _quantiles([float(t.bytes) for t in transfers]),
        "xfer_ms": _quantiles([t.xfer_ms for t in transfers]),
        "post_ms": _quantiles([t.post_ms for t in transfers]),
        "mb_per_s": (  # bytes per ms / 1e3 = MB per s
            sum(t.bytes for t in transfers) / sum(t.xfer_ms for t in transfers) / 1e3
            if transfers and sum(t.xfer_ms for t in transfers) > 0
            else None
        ),
        "each": [[t.bytes, t.xfer_ms, t.post_ms, t.descriptors] for t in transfers],
    }


def main(argv: list[str]) -> int:
    if len(argv) >= 3 and argv[0] == "mark":
        mark(Path(argv[1]), Path(argv[2]))
        return 0
    if len(argv) >= 4 and argv[0] == "since":
        summary = summarize(read_since(Path(argv[1]), Path(argv[2])))
        Path(argv[3]).write_text(json.dumps(summary, indent=1))
        print(
            f"kv transfers: {summary['transfers']}, bytes p50 {summary['bytes']['p50']}, "
            f"xfer ms p50 {summary['xfer_ms']['p50']} p90 {summary['xfer_ms']['p90']}"
        )
        return 0
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
