"""Admission before the upstream exchange and settlement after it, wired into the handler::

    reservation = await accounting.admit(ctx, request, counters)      # stage 3, or 429
    request = accounting.ask_for_usage(ctx, request)
    with accounting.settling(ctx, request, reservation, counters):    # stages 7-8, always
        await exchange()

``settling`` is a plain (synchronous) context manager on purpose: its exit cannot be cancelled,
so a disconnect, an upstream failure or a server shutdown still settles the reservation, records
the ledger row and counts the tokens.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager

import orjson
from prometheus_client import CollectorRegistry, Counter

from gateway.accounting.config import AccountingConfig
from gateway.accounting.ledger import Ledger, UsageRow
from gateway.accounting.ledger_sql import SqlLedgerStore
from gateway.accounting.tokens import TokenCounter
from gateway.accounting.usage import Usage, client_wants_usage, measured_usage, usage_requested
from gateway.context import RequestContext
from gateway.errors import GatewayError
from gateway.limits.admission import RateLimiter, Reservation
from gateway.proxy.parse import Operation, ParsedRequest
from gateway.storage.database import Database

CLIENT_CLOSED_REQUEST = 499  # as the handler records a client that left (nginx's convention)


class AccountingMetrics:
    """Tokens by tenant, model and direction are counted by telemetry (``gateway_tokens``)."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.partial = Counter(
            "gateway_partial_requests",
            "Requests accounted from what was delivered (streams cut before their usage came)",
            ["model"],
            registry=registry,
        )


class Accounting:
    def __init__(
        self, config: AccountingConfig, limiter: RateLimiter, registry: CollectorRegistry
    ) -> None:
        self.config = config
        self.limiter = limiter
        self.metrics = AccountingMetrics(registry)
        self.ledger: Ledger | None = None

    async def start(self, database: Database | None) -> None:
        """Start the ledger writer on the shared store (no store: no ledger)."""
        if database is not None and self.config.ledger:
            self.ledger = Ledger(
                SqlLedgerStore(database),
                batch_size=self.config.ledger_batch_size,
                interval=self.config.ledger_interval,
                close_timeout=self.config.ledger_close_timeout,
            )
            await self.ledger.start()

    async def stop(self) -> None:
        """Flush the ledger and wait for the limiter's settlements: nothing is lost on SIGTERM."""
        await self.limiter.backend.drain()
        if self.ledger is not None:
            await self.ledger.close()
        await self.limiter.aclose()

    async def admit(
        self, ctx: RequestContext, request: ParsedRequest, counters: Mapping[str, TokenCounter]
    ) -> Reservation:
        # Without a principal (authentication off) every caller shares the default limits.
        subjects = self.limiter.subjects(ctx.principal)
        if not subjects:  # nothing limits this caller: not even the tokens need counting
            return Reservation(None, 0)
        prompt = ctx.prompt_tokens
        if prompt is None:
            prompt = ctx.prompt_tokens = counters[request.model].count_request(
                request.operation, request.payload
            )
        return await self.limiter.admit(
            ctx.request_id, subjects, prompt, request.max_tokens, ctx.response_headers
        )

    def ask_for_usage(self, ctx: RequestContext, request: ParsedRequest) -> ParsedRequest:
        """For a stream, the request with the usage chunk asked for (stripped again on the way
        back unless the client asked for it itself)."""
        if not request.stream or request.operation is Operation.EMBEDDING:
            return request
        if client_wants_usage(request.payload):
            return request
        ctx.strip_usage = True
        payload = usage_requested(request.payload)
        return dataclasses.replace(request, payload=payload, body=orjson.dumps(payload))

    @contextmanager
    def settling(
        self,
        ctx: RequestContext,
        request: ParsedRequest,
        reservation: Reservation,
        counters: Mapping[str, TokenCounter],
    ) -> Iterator[None]:
        status = 0
        try:
            yield
            status = ctx.status
        except BaseException as exc:
            status = _status_of(exc)
            raise
        finally:
            counter = counters.get(request.model)
            usage = measured_usage(
                ctx.meter, lambda: _prompt_tokens(ctx, request, counter), counter
            )
            self.limiter.settle(reservation, usage.total)
            self._record(ctx, usage, status)

    def _record(self, ctx: RequestContext, usage: Usage, status: int) -> None:
        model = ctx.model or ""
        if usage.partial:
            self.metrics.partial.labels(model).inc()
        if self.ledger is None:
            return
        meter = ctx.meter
        first = None if meter is None else meter.first_token_at
        now = time.perf_counter()
        elapsed = now - ctx.started  # ctx.started is on the perf_counter clock
        self.ledger.record(
            UsageRow(
                created_at=time.time() - elapsed,
                request_id=ctx.request_id,
                tenant_id=ctx.tenant_id,
                key_id=ctx.key_public_id,
                model=model,
                pool=ctx.pool,
                variant=ctx.variant,
                input_tokens=usage.input_tokens,
                output_tokens=usage.output_tokens,
                cached_tokens=usage.cached_tokens,
                ttft_ms=None if first is None else (first - ctx.started) * 1000,
                duration_ms=elapsed * 1000,
                status=status or (CLIENT_CLOSED_REQUEST if ctx.client_disconnected else 0),
                partial=usage.partial,
            )
        )


def _prompt_tokens(
    ctx: RequestContext, request: ParsedRequest, counter: TokenCounter | None
) -> int:
    """Counted already for admission or routing, or now (a cut stream with limits off)."""
    if ctx.prompt_tokens is None and counter is not None:
        ctx.prompt_tokens = counter.count_request(request.operation, request.payload)
    return ctx.prompt_tokens or 0


def _status_of(exc: BaseException) -> int:
    if isinstance(exc, GatewayError):
        return exc.status
    if isinstance(exc, asyncio.CancelledError):
        return CLIENT_CLOSED_REQUEST
    return 500
