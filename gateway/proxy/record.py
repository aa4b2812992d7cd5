"""Stages 7 and 8, settle and record: one outcome built once, handed to every consumer.

The usage is decided here, by the one rule of :func:`gateway.wire.usage.settle_usage`; the
:class:`Outcome` is assembled once; then, in order: the limiter's settlement and the ledger row
(admitted requests only, exactly once), the request and token metrics, the variant's verdict
(the canary), the client span of the attempt that answered, and the outcome slot from which the
access log and the server span read it. Synchronous on purpose: nothing here can be cancelled
half way, so a client that left or a shutdown still settles and records.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from gateway.asgi import Scope
from gateway.flow.gate import Waited
from gateway.metrics import GatewayMetrics
from gateway.runtime.state import GatewayState
from gateway.runtime.table import ModelRoute, RoutingTable
from gateway.telemetry.attempt import prompt_length_band
from gateway.telemetry.server import current_trace_id
from gateway.wire.outcome import (
    NOTHING_DELIVERED,
    NOWHERE,
    PRINCIPAL_KEY,
    Arrival,
    Delivered,
    Ending,
    Outcome,
    RouteFacts,
    outcome_slot,
)
from gateway.wire.request import ParsedRequest
from gateway.wire.usage import NOTHING, Usage, settle_usage

if TYPE_CHECKING:
    from gateway.proxy.handler import Admitted, Exchanged


class Recorder:
    def __init__(self, state: GatewayState) -> None:
        self.state = state
        self.tracing_on = state.tracing.provider is not None

    def refused(
        self,
        scope: Scope,
        arrival: Arrival,
        request: ParsedRequest | None,
        route: ModelRoute | None,
        delivered: Delivered,
    ) -> None:
        """A request answered with an error before admission: no reservation, no ledger row."""
        outcome = self._outcome(
            scope, arrival, request, route, NOWHERE, delivered, Ending.REFUSED, NOTHING
        )
        observe(self.state.metrics, outcome)
        outcome_slot(scope).put(outcome)

    def admitted(
        self,
        scope: Scope,
        arrival: Arrival,
        table: RoutingTable,
        admitted: Admitted,
        exchanged: Exchanged | None,
    ) -> None:
        """An admitted request, however it ended (``exchanged`` None: the pipeline itself broke)."""
        request, route = admitted.request, admitted.route
        if exchanged is None:
            where, delivered, ending, reached = (
                NOWHERE,
                NOTHING_DELIVERED,
                Ending.GATEWAY_ERROR,
                False,
            )
        else:
            where, delivered, ending = exchanged.route, exchanged.delivered, exchanged.ending
            reached = _reached(exchanged)
        usage = settle_usage(
            reported=delivered.upstream_usage,
            reached=reached,
            complete=ending is Ending.COMPLETE,
            prompt_tokens=admitted.prompt.count,
            output_text=delivered.output_text,
            content_events=delivered.content_events,
            count_text=route.counter.count_text,
        )
        outcome = self._outcome(
            scope,
            arrival,
            request,
            route,
            where,
            delivered,
            ending,
            usage,
            admitted=True,
            reached=reached,
            prompt_tokens=admitted.prompt.counted,
            waited=None if exchanged is None else exchanged.waited,
        )
        self.state.accounting.settle(admitted.reservation, outcome)
        observe(self.state.metrics, outcome)
        if exchanged is not None:
            if exchanged.plan is not None:
                table.routing.observe(route.router, exchanged.plan, outcome)
            exchanged.attempts.end(outcome)
        outcome_slot(scope).put(outcome)

    def _outcome(
        self,
        scope: Scope,
        arrival: Arrival,
        request: ParsedRequest | None,
        route: ModelRoute | None,
        where: RouteFacts,
        delivered: Delivered,
        ending: Ending,
        usage: Usage,
        *,
        admitted: bool = False,
        reached: bool = False,
        prompt_tokens: int | None = None,
        waited: Waited | None = None,
    ) -> Outcome:
        principal = scope.get(PRINCIPAL_KEY)
        return Outcome(
            arrival=arrival,
            method=scope["method"],
            path=scope["path"],
            operation=None if request is None else request.operation,
            model=None if route is None else route.name,
            stream=None if request is None else request.stream,
            tenant_id=None if principal is None else principal.tenant_id,
            key_id=None if principal is None else principal.key_id,
            route=where,
            delivered=delivered,
            ending=ending,
            admitted=admitted,
            reached_upstream=reached,
            usage=usage,
            prompt_tokens=prompt_tokens,
            finished=time.perf_counter(),
            trace_id=current_trace_id() if self.tracing_on else None,
            queued=0.0 if waited is None else waited.seconds,
            band=None if waited is None else waited.band,
        )


def _reached(exchanged: Exchanged) -> bool:
    """The upstream accepted the request (a 2xx answer), or the client left after it was sent:
    the prefill may have run, so leaving early is never free."""
    if 200 <= exchanged.delivered.upstream_status < 300:
        return True
    return exchanged.ending is Ending.CLIENT_GONE and exchanged.sent_upstream


def observe(metrics: GatewayMetrics, outcome: Outcome) -> None:
    """The request, latency and token metrics of one outcome (labels from bounded sets only:
    configured model and pool names, status codes, tenants from the store)."""
    model = outcome.model or "unknown"
    pool = outcome.route.pool or ""
    status = outcome.status
    metrics.requests_by(model, pool, outcome.route.variant or "", str(status)).inc()
    metrics.duration_by(model, pool).observe(outcome.duration)
    tenant = outcome.tenant_id or ""
    metrics.tenant_requests_by(tenant, f"{status // 100}xx").inc()
    if outcome.ending is Ending.CLIENT_GONE:
        metrics.client_disconnects.labels(model, pool).inc()
    if outcome.error_code is not None and outcome.ending is Ending.UPSTREAM_FAILED:
        metrics.upstream_errors.labels(pool, outcome.error_code).inc()
    ttfb = outcome.time_to_first_byte
    if ttfb is not None:
        metrics.time_to_first_byte_by(model, pool).observe(ttfb)
    if outcome.stream and outcome.delivered.first_token_at is not None:
        ttft = outcome.time_to_first_token
        assert ttft is not None
        band = prompt_length_band(outcome.usage.input_tokens or outcome.prompt_tokens)
        metrics.time_to_first_token_by(model, pool, band).observe(ttft)
    per_token = outcome.time_per_output_token
    if per_token is not None:
        metrics.time_per_output_token_by(model, pool).observe(per_token)
    usage = outcome.usage
    if usage.input_tokens:
        metrics.tokens_by(tenant, model, "input").inc(usage.input_tokens)
    if usage.output_tokens:
        metrics.tokens_by(tenant, model, "output").inc(usage.output_tokens)
