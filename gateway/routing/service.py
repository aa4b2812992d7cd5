"""The route stage: count, choose a variant and a pool, dispatch, and learn from the outcome.

The handler's only routing code is::

    async with state.routing.serve(route.router, request, scope, ctx, send_to) as attempt:
        await relay(attempt.response)

Everything it decides is written on the request context (``variant``, ``pool``, ``replica``,
``routing_reason``), from where the response headers, the access log, metrics and spans read it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from types import TracebackType

from gateway.accounting.tokens import TokenCounter
from gateway.asgi import Scope, header
from gateway.context import RequestContext
from gateway.errors import GatewayError
from gateway.proxy.parse import ParsedRequest
from gateway.routing.config import Role, RoutingPolicy
from gateway.routing.dispatch import Attempt, Connection, Dispatcher, SendTo
from gateway.routing.metrics import RoutingMetrics
from gateway.routing.router import ModelRouter, RoutePlan, Variant

FORCE_VARIANT_HEADER = b"x-gateway-variant"
POOL_HINT_HEADER = b"x-gateway-pool-hint"


def prompt_tokens(
    ctx: RequestContext, request: ParsedRequest, counters: Mapping[str, TokenCounter]
) -> int:
    """The request's prompt tokens, counted once and kept on the context (admission and routing
    both need them)."""
    if ctx.prompt_tokens is None:
        counter = counters[request.model]
        ctx.prompt_tokens = counter.count_request(request.operation, request.payload)
    return ctx.prompt_tokens


def sticky_key(scope: Scope, ctx: RequestContext, request: ParsedRequest) -> bytes:
    """What keeps a caller on one variant: the API key's public id once authentication set it,
    else the request's ``user`` field, else the client address."""
    if ctx.key_public_id:
        return b"key:" + ctx.key_public_id.encode()
    user = request.payload.get("user")
    if isinstance(user, str) and user:
        return b"user:" + user.encode()
    client = scope.get("client")
    return f"addr:{client[0] if client else ''}".encode()


TRUSTED_LABEL = "routing.force"
"""A key whose labels say ``routing.force: "true"`` may force a variant or a pool."""


def may_steer(policy: RoutingPolicy, ctx: RequestContext) -> bool:
    if policy.force_headers == "always":
        return True
    if policy.force_headers == "never":
        return False
    principal = ctx.principal
    return principal is not None and principal.labels.get(TRUSTED_LABEL) == "true"


class Routing:
    """Routing for the whole gateway: token counters, the dispatcher, and the metrics."""

    def __init__(
        self,
        counters: Mapping[str, TokenCounter],
        dispatcher: Dispatcher,
        metrics: RoutingMetrics,
    ) -> None:
        self.counters = counters
        self.dispatcher = dispatcher
        self.metrics = metrics

    def serve(
        self,
        router: ModelRouter,
        request: ParsedRequest,
        scope: Scope,
        ctx: RequestContext,
        send_via: SendTo,
    ) -> Serving:
        """Decide now (variant, pools in order); connect and learn in ``async with``."""
        variant = self._variant(router, scope, ctx, request)
        if len(variant.by_role) > 1:  # only then do length and hints matter
            hint = self._hint(router.policy, scope, ctx)
            tokens = prompt_tokens(ctx, request, self.counters)
        else:
            hint, tokens = None, 0
        plan = router.plan(variant, tokens, request.max_tokens, hint)
        return Serving(self, router, plan, ctx, self.dispatcher.connect(plan, ctx, send_via))

    def _variant(
        self, router: ModelRouter, scope: Scope, ctx: RequestContext, request: ParsedRequest
    ) -> Variant:
        if len(router.variants) == 1:
            variant = router.choose_variant(b"", None)  # no key needed to pick the only one
        else:
            forced = header(scope, FORCE_VARIANT_HEADER)
            if forced is not None and may_steer(router.policy, ctx):
                variant = router.choose_variant(b"", forced.decode("latin-1"))
            else:
                variant = router.choose_variant(sticky_key(scope, ctx, request), None)
        ctx.variant = variant.name
        return variant

    def _hint(self, policy: RoutingPolicy, scope: Scope, ctx: RequestContext) -> Role | None:
        value = header(scope, POOL_HINT_HEADER)
        if value is None or not may_steer(policy, ctx):
            return None
        try:
            return Role(value.decode("latin-1").lower())
        except ValueError:
            return None

    def observe(
        self, router: ModelRouter, variant: Variant, ctx: RequestContext, *, error: bool
    ) -> None:
        model = router.name
        self.metrics.variant_request(model, variant.name, "error" if error else "ok").inc()
        ttft = _time_to_first_token(ctx)
        if ttft is not None and not error:
            self.metrics.variant_first_token(model, variant.name).observe(ttft)
            rate = _output_tokens_per_second(ctx)
            if rate is not None:
                self.metrics.variant_speed(model, variant.name).observe(rate)
        router.observe(variant, error, None if error else ttft)

    def on_rollback(self, router: ModelRouter) -> Callable[[Variant, str], None]:
        def rolled_back(variant: Variant, reason: str) -> None:
            self.metrics.rollbacks.labels(router.name, variant.name).inc()
            self.metrics.variant_weight.labels(router.name, variant.name).set(0)

        return rolled_back


class Serving:
    """``async with routing.serve(...) as attempt``: the answering attempt; on the way out, the
    variant's outcome (error or not, time to first token) for its metrics and rollback window.
    A request the client abandoned gives no verdict."""

    __slots__ = ("_connection", "_ctx", "_plan", "_router", "_routing", "attempt")

    def __init__(
        self,
        routing: Routing,
        router: ModelRouter,
        plan: RoutePlan,
        ctx: RequestContext,
        connection: Connection,
    ) -> None:
        self._routing = routing
        self._router = router
        self._plan = plan
        self._ctx = ctx
        self._connection = connection

    async def __aenter__(self) -> Attempt:
        ctx, variant = self._ctx, self._plan.variant
        try:
            attempt = await self._connection.__aenter__()
        except GatewayError:
            self._routing.observe(self._router, variant, ctx, error=True)
            raise
        self._routing.metrics.decision(
            self._router.name, variant.name, attempt.pool.name, ctx.routing_reason or ""
        ).inc()
        self.attempt = attempt
        return attempt

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self._connection.__aexit__(exc_type, exc, tb)
        ctx = self._ctx
        if exc_type is None:
            error = self.attempt.response.status >= 500 or ctx.error_code is not None
        elif issubclass(exc_type, GatewayError):
            error = True
        else:  # cancelled (the client left) or a bug: no verdict on the variant
            return
        self._routing.observe(self._router, self._plan.variant, ctx, error=error)


def _time_to_first_token(ctx: RequestContext) -> float | None:
    """A stream's first content token as the meter saw it; else (a whole answer) the first byte."""
    meter = ctx.meter
    if meter is not None and meter.first_token_at is not None:
        return meter.first_token_at - ctx.started
    return ctx.time_to_first_byte


def _output_tokens_per_second(ctx: RequestContext) -> float | None:
    """Decode speed of a metered stream: output tokens after the first, over their time."""
    meter = ctx.meter
    if meter is None or meter.usage is None:
        return None
    first, last = meter.first_token_at, meter.last_token_at
    tokens = meter.usage.get("completion_tokens")
    if first is None or last is None or last <= first or not isinstance(tokens, int):
        return None
    return (tokens - 1) / (last - first) if tokens > 1 else None


def routing_headers(ctx: RequestContext) -> list[tuple[bytes, bytes]]:
    """How the request was served, for the response: pool, variant, reason."""
    headers = []
    if ctx.pool is not None:
        headers.append((b"x-gateway-pool", ctx.pool.encode()))
    if ctx.variant is not None:
        headers.append((b"x-gateway-variant", ctx.variant.encode()))
    if ctx.routing_reason is not None:
        headers.append((b"x-gateway-route-reason", ctx.routing_reason.encode()))
    return headers
