"""The outermost pure-ASGI layer: request ids, the access log, and a last-resort 500.

Every request gets an :class:`Arrival`: a fresh id made by the gateway (the identity of the
request for limits, the ledger and upstream) and the client's well-formed ``x-request-id`` as a
correlation id. The response echoes the client's id when it sent one (else the gateway's) in
``x-request-id``, and always the gateway's own in ``x-gateway-request-id``. An exception that
escapes everything inside is answered here as an OpenAI-style 500 that still carries the ids, and
logged with that status. Pure ASGI rather than ``BaseHTTPMiddleware``, which buffers responses.
"""

from __future__ import annotations

import logging
import os
import re
import time

from starlette.types import ASGIApp

from gateway.accesslog import AccessLog
from gateway.asgi import Message, Receive, Scope, Send, send_response
from gateway.clock import SYSTEM_CLOCK, Clock
from gateway.errors import GatewayError
from gateway.metrics import GatewayMetrics
from gateway.server.overload import REFUSAL_KEY, refusal_counter
from gateway.wire.outcome import (
    ARRIVAL_KEY,
    OUTCOME_KEY,
    Arrival,
    Outcome,
    OutcomeSlot,
    arrival_now,
)

logger = logging.getLogger(__name__)

REQUEST_ID_HEADER = b"x-request-id"
GATEWAY_ID_HEADER = b"x-gateway-request-id"
_VALID_REQUEST_ID = re.compile(rb"[A-Za-z0-9._:\-]{1,128}")


def correlation_id_from(scope: Scope) -> str | None:
    """A well-formed incoming ``x-request-id``; anything else is ignored."""
    for key, value in scope["headers"]:
        if key == REQUEST_ID_HEADER:
            if _VALID_REQUEST_ID.fullmatch(value):
                return value.decode()  # type: ignore[no-any-return]
            break
    return None


def new_arrival(scope: Scope, clock: Clock = SYSTEM_CLOCK) -> Arrival:
    return arrival_now(correlation_id_from(scope), clock.wall)


class RequestIdMiddleware:
    def __init__(
        self,
        app: ASGIApp,
        *,
        metrics: GatewayMetrics,
        access_log: AccessLog | None,
        clock: Clock = SYSTEM_CLOCK,
    ) -> None:
        self.app = app
        self.metrics = metrics
        self.access_log = access_log
        self.clock = clock

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        arrival = scope[ARRIVAL_KEY] = new_arrival(scope, self.clock)
        slot = scope[OUTCOME_KEY] = OutcomeSlot()
        ids = [
            (REQUEST_ID_HEADER, (arrival.correlation_id or arrival.request_id).encode()),
            (GATEWAY_ID_HEADER, arrival.request_id.encode()),
        ]
        status = 0

        async def send_with_ids(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
                message["headers"] = [*message.get("headers", ()), *ids]
            await send(message)

        self.metrics.requests_in_flight += 1
        try:
            await self.app(scope, receive, send_with_ids)
        except Exception as exc:
            logger.exception("unexpected error", exc_info=exc)
            if status == 0:  # nothing sent yet: the client still gets a proper answer
                err = GatewayError("The gateway failed unexpectedly.")
                await send_response(send_with_ids, err.status, err.body())
            status = status or 500
        finally:
            self.metrics.requests_in_flight -= 1
            if self.access_log is not None:
                self._log(scope, arrival, slot.value, status)

    def _log(self, scope: Scope, arrival: Arrival, outcome: Outcome | None, status: int) -> None:
        assert self.access_log is not None
        elapsed = time.perf_counter() - arrival.started
        line: dict[str, object] = {
            "msg": "request",
            "request_id": arrival.request_id,
            "correlation_id": arrival.correlation_id,
            "method": scope["method"],
            "path": scope["path"],
            "status": status or (outcome.status if outcome is not None else 0),
            "latency_ms": round(elapsed * 1000, 3),
        }
        line.update(_NO_OUTCOME if outcome is None else outcome_fields(outcome))
        if outcome is None and REFUSAL_KEY in scope:  # refused by a server cap: no outcome
            line["error_code"] = scope[REFUSAL_KEY]
        self.access_log.write(line)


class RefusalLog:
    """The app's :class:`~gateway.server.refusals.RefusalRecorder`: a refusal the edge protocol
    made before a request existed (no method, no path, no ids of the client's) is counted with
    the server's other caps and gets an access-log line with the keys of every other line."""

    def __init__(self, metrics: GatewayMetrics, access_log: AccessLog | None) -> None:
        self.count = refusal_counter(metrics)
        self.access_log = access_log

    def refused(self, reason: str, err: GatewayError) -> None:
        self.count(reason)
        if self.access_log is None:
            return
        line: dict[str, object] = {
            "msg": "request",
            "request_id": os.urandom(12).hex(),
            "correlation_id": None,
            "method": None,
            "path": None,
            "status": err.status,
            "latency_ms": 0.0,
            **_NO_OUTCOME,
            "error_code": err.code,
        }
        self.access_log.write(line)


def outcome_fields(outcome: Outcome) -> dict[str, object]:
    """A proxied request's facts for its access log line (every line has the same keys)."""
    ttfb, route, usage = outcome.time_to_first_byte, outcome.route, outcome.usage
    return {
        "model": outcome.model,
        "pool": route.pool,
        "replica": route.replica,
        "stream": outcome.stream,
        "ttfb_ms": None if ttfb is None else round(ttfb * 1000, 3),
        "error_code": outcome.error_code,
        "ending": outcome.ending.value,
        "client_disconnected": outcome.ending == "client_gone" or None,
        "variant": route.variant,
        "routing_reason": route.reason,
        "predicted_ttft_ms": (
            None if route.predicted_ttft_ms is None else round(route.predicted_ttft_ms, 1)
        ),
        "prompt_tokens": outcome.prompt_tokens,
        "input_tokens": usage.input_tokens,
        "output_tokens": usage.output_tokens,
        "usage_source": usage.source.value,
        "trace_id": outcome.trace_id,
        "queue_ms": round(outcome.queued * 1000, 3) if outcome.queued else None,
        "priority_band": outcome.band,
    }


_NO_OUTCOME: dict[str, object] = dict.fromkeys(
    (
        "model", "pool", "replica", "stream", "ttfb_ms", "error_code", "ending",
        "client_disconnected", "variant", "routing_reason", "predicted_ttft_ms", "prompt_tokens",
        "input_tokens", "output_tokens", "usage_source", "trace_id", "queue_ms", "priority_band",
    )
)  # fmt: skip
