"""The one outcome of a request: built once at the end of the pipeline, read by every consumer.

Each stage returns a value; the handler assembles them into one :class:`Outcome` and hands that to
the limiter's settlement, the usage ledger, the metrics, the spans, the canary judgement and the
access log. Every number about a request (prompt and output tokens, time to first token, time per
output token, tokens per second) is a property here, computed in one place::

    outcome = Outcome(arrival, ..., delivered=delivered, usage=usage)
    outcome.time_to_first_token, outcome.usage.output_tokens, outcome.client_caused

:class:`Arrival` is what the outermost layer knows when a request arrives. ASGI apps return
nothing, so the scope also carries a one-shot :class:`OutcomeSlot` (``outcome_slot(scope)``)
through which the pipeline hands its outcome back out to the layers around it (access log, server
span). The slot is the scope's, not the arrival's: the outcome refers to its arrival, and an
arrival that held its outcome would make every request a reference cycle, left for the garbage
collector to find (a pause of about 10 ms every few thousand requests).
"""

from __future__ import annotations

import os
import time
from enum import StrEnum

from gateway.asgi import Scope
from gateway.clock import Reading
from gateway.values import value
from gateway.wire.request import Operation
from gateway.wire.usage import Usage

ARRIVAL_KEY = "gateway.arrival"
OUTCOME_KEY = "gateway.outcome"
PRINCIPAL_KEY = "gateway.principal"

CLIENT_CLOSED_REQUEST = 499  # nginx's convention: the client left; for logs and metrics only


class Ending(StrEnum):
    """How the exchange ended, which decides what is charged and who is blamed."""

    COMPLETE = "complete"
    """The whole answer reached the client (an upstream error status included)."""
    REFUSED = "refused"
    """The gateway answered with an error before any upstream answer (400, 404, 429, 503...)."""
    UPSTREAM_FAILED = "upstream_failed"
    """The upstream failed or stalled (before the answer started, or mid-stream)."""
    CLIENT_GONE = "client_gone"
    """The client left before the answer was complete."""
    SHUTDOWN = "shutdown"
    """The gateway itself stopped serving the request (a shutdown past its grace period)."""
    GATEWAY_ERROR = "gateway_error"
    """A bug: an unexpected exception (answered 500)."""


class OutcomeSlot:
    """Holds the one outcome of a request, put once by the pipeline that built it."""

    __slots__ = ("value",)

    def __init__(self) -> None:
        self.value: Outcome | None = None

    def put(self, outcome: Outcome) -> None:
        if self.value is not None:
            raise RuntimeError("a request's outcome was built twice")
        self.value = outcome


@value
class Arrival:
    """What is known when a request arrives; the same for every stage."""

    request_id: str
    """Made by the gateway: the identity of the request for limits, the ledger and upstream."""
    correlation_id: str | None
    """The client's own well-formed ``x-request-id``: echoed, logged and sent upstream alongside,
    never trusted for identity."""
    started: float
    """``time.perf_counter()`` at arrival; every other time of the request is on this clock."""
    started_wall: float
    """``time.time()`` at arrival, for the ledger row."""


def arrival_now(correlation_id: str | None, wall: Reading = time.time) -> Arrival:
    """A request arriving now, with a fresh gateway id; ``wall``: the app's clock's reading."""
    return Arrival(
        request_id=os.urandom(12).hex(),
        correlation_id=correlation_id,
        started=time.perf_counter(),
        started_wall=wall(),
    )


def arrival_of(scope: Scope) -> Arrival:
    return scope[ARRIVAL_KEY]  # type: ignore[no-any-return]


def outcome_slot(scope: Scope) -> OutcomeSlot:
    return scope[OUTCOME_KEY]  # type: ignore[no-any-return]


@value
class RouteFacts:
    """Where a request went: routing's decision and the replica that answered."""

    variant: str | None = None
    pool: str | None = None
    replica: str | None = None
    reason: str | None = None
    predicted_ttft_ms: float | None = None
    """The serving pool's predicted time to first token (``routing.latency`` on and its model
    confident; issue 38), else None."""

    def headers(self) -> list[tuple[bytes, bytes]]:
        """How the request was served, for the response: pool, variant, reason, the
        predicted TTFT."""
        found = []
        if self.pool is not None:
            found.append((b"x-gateway-pool", self.pool.encode()))
        if self.variant is not None:
            found.append((b"x-gateway-variant", self.variant.encode()))
        if self.reason is not None:
            found.append((b"x-gateway-route-reason", self.reason.encode()))
        if self.predicted_ttft_ms is not None:
            found.append((b"x-gateway-predicted-ttft-ms", b"%d" % round(self.predicted_ttft_ms)))
        return found


NOWHERE = RouteFacts()


@value
class Delivered:
    """What the relay delivered to the client, as far as it got (a cut stream included)."""

    status: int
    """The status sent to the client; 0 when nothing was sent."""
    upstream_status: int = 0
    """The status of the upstream answer that was relayed; 0 when none came."""
    first_byte_at: float | None = None
    first_token_at: float | None = None
    last_token_at: float | None = None
    content_events: int = 0
    upstream_usage: Usage | None = None
    """The upstream's own ``usage`` block, when it came."""
    output_text: str = ""
    """The text delivered, to count the output of a stream cut before its usage came (empty
    when the upstream's usage came and the meter did not decode the stream's token deltas)."""
    finish_reasons: tuple[str, ...] = ()
    response_id: str | None = None
    response_model: str | None = None
    error_code: str | None = None
    """The gateway's error code when the exchange failed (also after the stream started)."""


NOTHING_DELIVERED = Delivered(status=0)


@value
class Outcome:
    """Everything about one finished request, for every consumer (see the module docstring)."""

    arrival: Arrival
    method: str
    path: str
    operation: Operation | None
    model: str | None
    """The configured model name; None when the request named no model the gateway serves."""
    stream: bool | None
    tenant_id: str | None
    key_id: str | None
    route: RouteFacts
    delivered: Delivered
    ending: Ending
    admitted: bool
    """A reservation was taken: the request is settled and leaves one ledger row."""
    reached_upstream: bool
    usage: Usage
    prompt_tokens: int | None
    """Counted by the gateway (None when nothing needed the count)."""
    finished: float
    trace_id: str | None = None
    queued: float = 0.0
    """Seconds it waited in the flow-control queue (0.0: it went straight on)."""
    band: str | None = None
    """Its priority band, when flow control is on."""
    batch_id: str | None = None
    """The batch it was a line of (gateway/batches/); None: it came over HTTP."""

    @property
    def status(self) -> int:
        """The status as logs, metrics and the ledger record it: 499 for a client that left
        (whatever had been sent), else the status sent; 500 for a bug that sent nothing."""
        if self.ending is Ending.CLIENT_GONE:
            return CLIENT_CLOSED_REQUEST
        if self.delivered.status:
            return self.delivered.status
        if self.ending is Ending.SHUTDOWN:
            return 503
        return 500 if self.ending is Ending.GATEWAY_ERROR else 0

    @property
    def error_code(self) -> str | None:
        return self.delivered.error_code

    @property
    def duration(self) -> float:
        return self.finished - self.arrival.started

    @property
    def time_to_first_byte(self) -> float | None:
        at = self.delivered.first_byte_at
        return None if at is None else at - self.arrival.started

    @property
    def time_to_first_token(self) -> float | None:
        """A stream's first content token; else (a whole answer) its first byte."""
        at = self.delivered.first_token_at
        if at is not None:
            return at - self.arrival.started
        return None if self.stream else self.time_to_first_byte

    @property
    def time_per_output_token(self) -> float | None:
        """Seconds between output tokens after the first, over the stream's decode interval."""
        first, last = self.delivered.first_token_at, self.delivered.last_token_at
        tokens = self.usage.output_tokens
        if first is None or last is None or last <= first or tokens < 2:
            return None
        return (last - first) / (tokens - 1)

    @property
    def tokens_per_second(self) -> float | None:
        per_token = self.time_per_output_token
        return None if per_token is None else 1.0 / per_token

    @property
    def client_caused(self) -> bool:
        """The client's doing (bad request, gone, limited): never held against an upstream."""
        return self.ending in (Ending.CLIENT_GONE, Ending.REFUSED) or (
            self.ending is Ending.COMPLETE and 400 <= self.delivered.upstream_status < 500
        )

    @property
    def upstream_failed(self) -> bool:
        """The upstream failed this request: a 5xx, a connect or read failure, a stall."""
        return self.ending is Ending.UPSTREAM_FAILED or self.delivered.upstream_status >= 500
