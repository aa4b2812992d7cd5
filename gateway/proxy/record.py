"""Stages 7 and 8, settle and record: one outcome built once, handed to every consumer.

The usage is decided here, by the one rule of :func:`gateway.wire.usage.settle_usage`; the
:class:`Outcome` is assembled once; then, in order: the limiter's settlement and the ledger row
(admitted requests only, exactly once), the request and token metrics, the variant's verdict
(the canary), the client span of the attempt that answered, and the outcome slot from which the
access log and the server span read it. It reads the request value, never an HTTP request.
Synchronous on purpose: nothing here can be cancelled half way, so a client that left or a
shutdown still settles and records.
"""

from __future__ import annotations

import time

from gateway.accounting.stage import Accounting
from gateway.metrics import GatewayMetrics
from gateway.proxy.incoming import Incoming
from gateway.proxy.stages import Ended, Exchange, Settled
from gateway.routing.outcomes import OutcomeFeed
from gateway.runtime.table import ModelRoute
from gateway.telemetry import Tracing
from gateway.telemetry.attempt import prompt_length_band
from gateway.telemetry.server import current_trace_id
from gateway.wire.outcome import (
    NOTHING_DELIVERED,
    NOWHERE,
    Delivered,
    Ending,
    Outcome,
    OutcomeSlot,
)
from gateway.wire.request import ParsedRequest
from gateway.wire.usage import settle_usage


class Recorder:
    """Settles and records through the parts it needs: the metrics, the accounting (the
    limiter's settlement, the ledger), the per-replica outcome feed, and tracing (whether
    outcomes carry a trace id)."""

    def __init__(
        self,
        metrics: GatewayMetrics,
        accounting: Accounting,
        outcomes: OutcomeFeed,
        tracing: Tracing,
    ) -> None:
        self.metrics = metrics
        self.accounting = accounting
        self.outcomes = outcomes
        self.tracing_on = tracing.provider is not None

    def refused(
        self,
        incoming: Incoming,
        request: ParsedRequest | None,
        route: ModelRoute | None,
        delivered: Delivered,
        slot: OutcomeSlot,
    ) -> None:
        """A request answered with an error before admission: no reservation, no ledger row."""
        settled = Settled(Ending.REFUSED, delivered=delivered)
        outcome = self._outcome(incoming, request, route, settled)
        observe(self.metrics, outcome)
        slot.put(outcome)

    def admitted(
        self, incoming: Incoming, exchange: Exchange, ended: Ended | None, slot: OutcomeSlot
    ) -> None:
        """An admitted request, however it ended (``ended`` None: the pipeline itself broke)."""
        admitted = exchange.admitted
        request, route = admitted.request, admitted.route
        if ended is None:
            ending, where, delivered, reached = (
                Ending.GATEWAY_ERROR,
                NOWHERE,
                NOTHING_DELIVERED,
                False,
            )
        else:
            ending, where, delivered = ended.ending, exchange.attempts.route, exchange.delivered()
            reached = _reached(ending, delivered, exchange.attempts.sent)
        usage = settle_usage(
            reported=delivered.upstream_usage,
            reached=reached,
            complete=ending is Ending.COMPLETE,
            prompt_tokens=admitted.prompt.count,
            output_text=delivered.output_text,
            content_events=delivered.content_events,
            count_text=route.counter.count_text,
        )
        settled = Settled(
            ending,
            where,
            delivered,
            usage,
            True,
            reached,
            prompt_tokens=admitted.prompt.counted,
            waited=None if ended is None else ended.waited,
        )
        outcome = self._outcome(incoming, request, route, settled)
        self.accounting.settle(admitted.reservation, outcome)
        if admitted.turn is not None:  # a stored response cut before its end, kept as it got
            admitted.turn.settle(ending)
        observe(self.metrics, outcome)
        self.outcomes.publish(outcome)  # the per-replica outcome feed
        if ended is not None:
            if ended.plan is not None:
                exchange.table.routing.observe(route.router, ended.plan, outcome)
            exchange.spans.end(outcome)
        slot.put(outcome)

    def _outcome(
        self,
        incoming: Incoming,
        request: ParsedRequest | None,
        route: ModelRoute | None,
        settled: Settled,
    ) -> Outcome:
        principal = incoming.principal
        return Outcome(
            arrival=incoming.arrival,
            method=incoming.method,
            path=incoming.path,
            operation=None if request is None else request.operation,
            model=None if route is None else route.name,
            stream=None if request is None else request.stream,
            tenant_id=None if principal is None else principal.tenant_id,
            key_id=None if principal is None else principal.key_id,
            route=settled.route,
            delivered=settled.delivered,
            ending=settled.ending,
            admitted=settled.admitted,
            reached_upstream=settled.reached,
            usage=settled.usage,
            prompt_tokens=settled.prompt_tokens,
            finished=time.perf_counter(),
            trace_id=current_trace_id() if self.tracing_on else None,
            queued=0.0 if settled.waited is None else settled.waited.seconds,
            band=None if settled.waited is None else settled.waited.band,
            batch_id=incoming.batch_id,
        )


def _reached(ending: Ending, delivered: Delivered, sent: bool) -> bool:
    """The upstream accepted the request (a 2xx answer), or the client left after it was sent:
    the prefill may have run, so leaving early is never free."""
    if 200 <= delivered.upstream_status < 300:
        return True
    return ending is Ending.CLIENT_GONE and sent


def observe(metrics: GatewayMetrics, outcome: Outcome) -> None:
    """The request, latency and token metrics of one outcome (labels from bounded sets only:
    configured model and pool names, status codes, tenants from the store)."""
    model = outcome.model or "unknown"
    pool = outcome.route.pool or ""
    status = outcome.status
    metrics.requests.labels(model, pool, outcome.route.variant or "", str(status)).inc()
    metrics.duration.labels(model, pool).observe(outcome.duration)
    tenant = outcome.tenant_id or ""
    metrics.tenant_requests.labels(tenant, f"{status // 100}xx").inc()
    if outcome.ending is Ending.CLIENT_GONE:
        metrics.client_disconnects.labels(model, pool).inc()
    if outcome.error_code is not None and outcome.ending is Ending.UPSTREAM_FAILED:
        metrics.upstream_errors.labels(pool, outcome.error_code).inc()
    ttfb = outcome.time_to_first_byte
    if ttfb is not None:
        metrics.time_to_first_byte.labels(model, pool).observe(ttfb)
    if outcome.stream and outcome.delivered.first_token_at is not None:
        ttft = outcome.time_to_first_token
        assert ttft is not None
        band = prompt_length_band(outcome.usage.input_tokens or outcome.prompt_tokens)
        metrics.time_to_first_token.labels(model, pool, band).observe(ttft)
    per_token = outcome.time_per_output_token
    if per_token is not None:
        metrics.time_per_output_token.labels(model, pool).observe(per_token)
    usage = outcome.usage
    if usage.input_tokens:
        metrics.tokens.labels(tenant, model, "input").inc(usage.input_tokens)
    if usage.output_tokens:
        metrics.tokens.labels(tenant, model, "output").inc(usage.output_tokens)
    if usage.partial:
        metrics.partial_requests.labels(outcome.model or "").inc()
