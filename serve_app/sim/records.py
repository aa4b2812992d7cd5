"""What the simulator saw: one record per request, kept for tests to inspect.

A record is a plain dict (JSON-ready for ``GET /sim/requests``) updated in place as the request
progresses. Only the last ``max_records`` are kept.
"""

from __future__ import annotations

import time
from collections import deque
from typing import Any, TypedDict


class RequestRecord(TypedDict):
    """One request as the simulator saw it; times are ``time.time()`` seconds."""

    seq: int  # 1, 2, ... in arrival order; not reset by /sim/reset
    request_id: str | None  # the incoming x-request-id header
    client_request_id: str | None  # x-client-request-id: a gateway's correlation id
    path: str
    model: str | None
    stream: bool
    body: Any  # the parsed JSON body; None when it was not JSON
    headers: dict[str, str]  # lower-case names
    received_at: float
    first_token_at: float | None  # the first token produced (after the prefill delay)
    completed_at: float | None  # the response finished (or the simulator aborted it)
    cancelled: bool  # the client went away before the response finished
    cancelled_at: float | None
    chunks_sent: int  # streamed token chunks (the role chunk and usage chunk not counted)
    aborted: bool  # the simulator dropped the connection (x-sim-fail-after)
    status: int | None  # the status answered; None when none was


class RequestLog:
    """A bounded log of request records::

    log = RequestLog(max_records=10_000)
    record = log.open("/v1/completions", headers)
    log.snapshot()  # list of records, oldest first
    """

    def __init__(self, max_records: int) -> None:
        self._records: deque[RequestRecord] = deque(maxlen=max_records)
        self._seq = 0

    def open(self, path: str, headers: dict[str, str]) -> RequestRecord:
        self._seq += 1
        record: RequestRecord = {
            "seq": self._seq,
            "request_id": headers.get("x-request-id"),
            "client_request_id": headers.get("x-client-request-id"),
            "path": path,
            "model": None,
            "stream": False,
            "body": None,
            "headers": headers,
            "received_at": time.time(),
            "first_token_at": None,
            "completed_at": None,
            "cancelled": False,
            "cancelled_at": None,
            "chunks_sent": 0,
            "aborted": False,
            "status": None,
        }
        self._records.append(record)
        return record

    def snapshot(self) -> list[RequestRecord]:
        return list(self._records)

    def clear(self) -> None:
        self._records.clear()
