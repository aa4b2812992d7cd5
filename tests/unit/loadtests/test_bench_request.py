"""The in-process per-request benchmark runs the real app and reports a figure per cell.

Run as the README runs it (a child process per sample, the full config's key made by the
gateway's own CLI), with a few requests: every request must have answered 200 (the child asserts
it), and every cell of the table holds a positive best and median.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).parents[3]


def test_every_cell_is_measured_on_answered_requests() -> None:
    script = str(ROOT / "loadtests" / "bench_request.py")
    result = subprocess.run(
        [sys.executable, script, "--requests", "20", "--rounds", "1"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    row = next(line for line in result.stdout.splitlines() if line.startswith("| now |"))
    cells = [c.strip() for c in row.strip("|").split("|")][1:]
    assert len(cells) == 4  # bare and full, JSON and SSE
    for cell in cells:
        figures = re.fullmatch(r"(\S+) / (\S+)", cell)
        assert figures is not None, cell
        best, median = (float(x) for x in figures.groups())
        assert 0 < best <= median
