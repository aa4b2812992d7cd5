"""Per-request facts gathered along the pipeline, read at the end by the access log and metrics."""

from __future__ import annotations

from dataclasses import dataclass, field

from gateway.asgi import Scope
from gateway.auth.models import Principal
from gateway.proxy.sse import StreamMeter

SCOPE_KEY = "gateway.context"


@dataclass(slots=True)
class RequestContext:
    request_id: str
    started: float
    model: str | None = None
    pool: str | None = None
    replica: str | None = None
    stream: bool | None = None
    status: int = 0
    error_code: str | None = None
    time_to_first_byte: float | None = None
    client_disconnected: bool = False
    # Who and where, for spans and metrics: set by authentication (tenant, key) and routing
    # (variant, reason); ids only, never secrets.
    tenant_id: str | None = None
    key_public_id: str | None = None
    principal: Principal | None = None
    """The authenticated key: its tenant, models and limits (None when auth is off)."""
    variant: str | None = None
    routing_reason: str | None = None
    trace_id: str | None = None
    """The request's trace (32 hex digits) when it was sampled: the log line that finds it."""
    prompt_tokens: int | None = None
    """Counted once (gateway/accounting/tokens.py) for admission and routing alike."""
    meter: StreamMeter | None = None
    """What the response carried (usage, token times, finish reasons), once relayed."""
    response_headers: list[tuple[bytes, bytes]] = field(default_factory=list)
    """Headers every response carries, errors included (the rate-limit quotas)."""
    strip_usage: bool = False
    """The gateway asked for the stream's usage chunk itself: the relay strips it again."""
    extra: dict[str, object] = field(default_factory=dict)


def context_of(scope: Scope) -> RequestContext:
    """The context the request-id middleware put into the scope."""
    return scope[SCOPE_KEY]  # type: ignore[no-any-return]
