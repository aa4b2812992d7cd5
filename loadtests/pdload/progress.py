"""The live progress bar: tqdm, with the running completion rate, errors and requests in flight.

tqdm is the smallest well-kept bar that redraws in place on a terminal, degrades to periodic
lines in a log file, and costs about a microsecond per update (it redraws at most every
``mininterval`` seconds), so it does not slow the event loop it runs on.
"""

from __future__ import annotations

import sys
import time

from tqdm import tqdm

from loadtests.pdload.records import RequestRecord


class Progress:
    def __init__(self, label: str, total: int | None, enabled: bool) -> None:
        self._bar = tqdm(
            total=total,
            desc=label,
            unit="req",
            file=sys.stderr,
            disable=not enabled,
            mininterval=0.5,
            dynamic_ncols=True,
        )
        self._start = time.perf_counter()
        self._done = 0
        self._errors = 0

    def __call__(self, record: RequestRecord) -> None:
        self._done += 1
        self._errors += record.error is not None
        self._bar.update(1)
        if self._bar.disable:
            return
        elapsed = max(time.perf_counter() - self._start, 1e-9)
        self._bar.set_postfix_str(
            f"{self._done / elapsed:.1f} req/s, errors {self._errors}", refresh=False
        )

    def close(self) -> None:
        self._bar.close()
