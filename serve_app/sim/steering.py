"""Per-request steering by request headers, so a test can shape one request.

- ``x-sim-ttft-ms``: time to first token for this request, replacing the prefill model.
- ``x-sim-itl-ms``: interval between tokens for this request, replacing the decode model.
- ``x-sim-status``: answer with this status and a vLLM-style error body.
- ``x-sim-fail-after``: streaming, abort the connection after N content chunks;
  non-streaming, abort after N tokens' time instead of answering.
- ``x-sim-hang``: ``1`` never answers; the request waits until the client goes away.
"""

from __future__ import annotations

from dataclasses import dataclass


class SteeringError(ValueError):
    """A steering header whose value is not a number."""


def _number(headers: dict[str, str], name: str) -> float | None:
    value = headers.get(name)
    if value is None:
        return None
    try:
        return float(value)
    except ValueError as e:
        raise SteeringError(f"header {name} must be a number, got {value!r}") from e


@dataclass(frozen=True, slots=True)
class Steering:
    """What the steering headers of one request ask for; all ``None``/False when absent."""

    ttft_ms: float | None = None
    itl_ms: float | None = None
    status: int | None = None
    fail_after: int | None = None
    hang: bool = False

    @classmethod
    def from_headers(cls, headers: dict[str, str]) -> Steering:
        status = _number(headers, "x-sim-status")
        fail_after = _number(headers, "x-sim-fail-after")
        return cls(
            ttft_ms=_number(headers, "x-sim-ttft-ms"),
            itl_ms=_number(headers, "x-sim-itl-ms"),
            status=None if status is None else int(status),
            fail_after=None if fail_after is None else int(fail_after),
            hang=headers.get("x-sim-hang", "") not in ("", "0", "false"),
        )


NO_STEERING = Steering()


def has_steering(headers: dict[str, str]) -> bool:
    """Cheap check for the hot path: any ``x-sim-`` header at all."""
    return any(name.startswith("x-sim-") for name in headers)
