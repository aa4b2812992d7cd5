"""Local GPU profile only: one log line per NIXL KV transfer, with its bytes and milliseconds.

vLLM's NIXL connector measures each transfer (NIXL's telemetry: bytes, transfer and post times,
descriptors) but only reports aggregates: Prometheus histograms through Ray's metrics agent, or a
periodic log line that Ray Serve LLM never triggers. This vLLM general plugin (entry point
``vllm.general_plugins``) logs each transfer as it is recorded, on the side that pulls the KV
(decode), so a benchmark can read per-request figures from decode's log::

    pd-serve kv_transfer bytes=20971520 xfer_ms=1.234 post_ms=0.101 descriptors=640

It does nothing unless the process's environment says ``PD_SERVE_KV_TRANSFER_LOG=1`` (the local
GPU profile's decode side); :func:`parse_transfer_lines` reads the lines back.
"""

from __future__ import annotations

import functools
import logging
import os
import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

ENV = "PD_SERVE_KV_TRANSFER_LOG"
MARKER = "pd-serve kv_transfer"
_LINE = re.compile(MARKER + r" bytes=(\d+) xfer_ms=([\d.]+) post_ms=([\d.]+) descriptors=(\d+)")
logger = logging.getLogger("vllm.pd_serve.kv_transfer")


@dataclass(frozen=True, slots=True)
class Transfer:
    bytes: int
    xfer_ms: float
    post_ms: float
    descriptors: int


def register() -> None:
    if os.environ.get(ENV) != "1":
        return
    from vllm.distributed.kv_transfer.kv_connector.v1.nixl.stats import NixlKVConnectorStats

    log_each_transfer(NixlKVConnectorStats)


def log_each_transfer(stats_class: Any) -> None:
    """Make ``stats_class.record_transfer(res)`` also log the transfer (idempotent)."""
    original = stats_class.record_transfer
    if getattr(original, "_pd_serve_logged", False):
        return

    @functools.wraps(original)
    def record_transfer(self: Any, res: Any) -> None:
        original(self, res)
        # NIXL's telemetry is in microseconds.
        logger.info(
            "%s bytes=%d xfer_ms=%.3f post_ms=%.3f descriptors=%d",
            MARKER,
            res.totalBytes,
            res.xferDuration / 1e3,
            res.postDuration / 1e3,
            res.descCount,
        )

    record_transfer._pd_serve_logged = True  # type: ignore[attr-defined]
    stats_class.record_transfer = record_transfer


def parse_transfer_lines(lines: Iterable[str]) -> list[Transfer]:
    transfers = []
    for line in lines:
        match = _LINE.search(line)
        if match:
            size, xfer, post, descriptors = match.groups()
            transfers.append(Transfer(int(size), float(xfer), float(post), int(descriptors)))
    return transfers
