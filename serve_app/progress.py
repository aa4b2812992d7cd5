"""Start-up progress a person can follow: one short line per phase, with the time since start.

``pd-serve local up`` prints its own phases; the driver process that owns Ray appends its phases
(Ray started, each deployment healthy) to an events file that ``local up`` follows::

    progress = Progress(sys.stdout)
    progress.phase("generating the tiny model")         # [   0.0s] generating the tiny model
    events = EventLog(state_dir / "events.jsonl")
    events.write("deployment ready", "pd/Decode")        # in the driver
    for phase, detail in events.read_new():              # in local up
        progress.phase(f"{phase}: {detail}")
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import TextIO


class Progress:
    """Prints ``[ elapsed ] what`` lines; the clock is injected so tests need not wait."""

    def __init__(self, out: TextIO | None, clock: Callable[[], float] = time.monotonic) -> None:
        self._out = out
        self._clock = clock
        self._start = clock()

    def elapsed(self) -> float:
        return self._clock() - self._start

    def phase(self, text: str) -> None:
        if self._out is not None:
            print(f"[{self.elapsed():6.1f}s] {text}", file=self._out, flush=True)


class EventLog:
    """Phases as JSON lines in a file: written by one process, followed by another."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._offset = 0

    def write(self, phase: str, detail: str = "") -> None:
        with self.path.open("a") as f:
            f.write(json.dumps({"phase": phase, "detail": detail}) + "\n")

    def read_new(self) -> list[tuple[str, str]]:
        """Complete lines written since the last call (a half-written last line waits)."""
        try:
            with self.path.open("rb") as f:
                f.seek(self._offset)
                data = f.read()
        except FileNotFoundError:
            return []
        complete = data[: data.rfind(b"\n") + 1]
        self._offset += len(complete)
        events = []
        for line in complete.splitlines():
            event = json.loads(line)
            events.append((str(event["phase"]), str(event.get("detail", ""))))
        return events


def describe(phase: str, detail: str) -> str:
    return f"{phase}: {detail}" if detail else phase
