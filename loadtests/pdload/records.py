"""What one measured request left behind: the row of ``report.json``'s ``requests`` list."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any


@dataclass(slots=True)
class RequestRecord:
    """One request as measured. Times are seconds; ``sent_at`` is from the step's start.

    ``error`` is ``None`` for a success, else a short type: ``connect``, ``timeout``,
    ``http_<status>``, ``stream_error``, ``truncated`` (no ``[DONE]``), ``protocol``.
    """

    target: str
    step: int
    index: int
    shape: str
    sent_at: float
    lag: float
    """How late the request left against its schedule (open loop); the tool's own delay."""
    expected_prompt_tokens: int
    max_tokens: int
    status: int | None = None
    error: str | None = None
    error_message: str | None = None
    ttft: float | None = None
    e2e: float | None = None
    tpot: float | None = None
    itls: list[float] = field(default_factory=list)
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    cached_tokens: int | None = None
    """``usage.prompt_tokens_details.cached_tokens``: prompt tokens the engine had cached."""
    chunks: int = 0
    pool: str | None = None
    variant: str | None = None
    route_reason: str | None = None
    predicted_ttft_ms: str | None = None
    """The gateway's predicted TTFT for the pool that served (its latency models, issue 38)."""
    tenant: str | None = None

    @property
    def ok(self) -> bool:
        return self.error is None

    def to_json(self) -> dict[str, Any]:
        row = asdict(self)
        row["itls"] = [round(x, 6) for x in self.itls]
        for key in ("sent_at", "lag", "ttft", "e2e", "tpot"):
            if row[key] is not None:
                row[key] = round(row[key], 6)
        return row
