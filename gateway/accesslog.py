"""The access log: one JSON line per request, written in batches off the request's path.

Going through :mod:`logging` cost a LogRecord, the caller lookup, a formatter, a write and a flush
per request (measured: README, Performance); here a request only serialises its fields (orjson) and
appends the line, and the lines are written together once per ``interval``::

    log = AccessLog(sys.stderr.buffer.fileno())
    log.write({"request_id": "...", "status": 200})
    log.close()   # at shutdown: writes what is pending
"""

from __future__ import annotations

import asyncio
import os
import time
from typing import Any

import orjson


class AccessLog:
    def __init__(self, fd: int, interval: float = 0.05) -> None:
        self._fd = fd
        self._interval = interval
        self._pending: list[bytes] = []
        self._timer: asyncio.TimerHandle | None = None

    def write(self, fields: dict[str, Any]) -> None:
        entry = {"ts": round(time.time(), 6), "level": "info", "logger": "gateway.access"}
        entry.update(fields)
        self._pending.append(orjson.dumps(entry, default=str, option=orjson.OPT_APPEND_NEWLINE))
        if self._timer is None:
            try:
                loop = asyncio.get_running_loop()
            except RuntimeError:  # no loop (a test or a shutdown path): write at once
                self.flush()
                return
            self._timer = loop.call_later(self._interval, self.flush)

    def flush(self) -> None:
        self._timer = None
        if not self._pending:
            return
        data = b"".join(self._pending)
        self._pending.clear()
        while data:
            written = os.write(self._fd, data)
            data = data[written:]

    def close(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
        self.flush()
