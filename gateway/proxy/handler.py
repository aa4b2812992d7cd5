"""The OpenAI endpoints that proxy to an upstream pool: the pipeline, stage by stage.

parse -> (key's model check) -> admit -> route -> forward -> relay -> settle and record
(gateway/accounting/stage.py, on the way out whatever happened). Authentication runs before, in
gateway/auth/middleware.py, deny by default, and leaves the caller on the request context.
Reading :meth:`ProxyEndpoint.__call__` is reading the product.
"""

from __future__ import annotations

import asyncio

import orjson

from gateway.asgi import Receive, Scope, Send
from gateway.auth.access import check_model
from gateway.context import RequestContext, context_of
from gateway.errors import GatewayError
from gateway.proxy.disconnect import DisconnectWatch
from gateway.proxy.parse import Operation, ParsedRequest, parse_request, read_body
from gateway.proxy.relay import relay_stream, relay_whole
from gateway.proxy.upstream import UpstreamResponse
from gateway.routing.pools import Pool, Replica
from gateway.state import GatewayState, ModelRoute
from gateway.telemetry.attempt import UpstreamAttempts

CLIENT_CLOSED_REQUEST = 499  # nginx's convention, for logs and metrics only


class ProxyEndpoint:
    """A pure-ASGI endpoint for one OpenAI operation (chat, completions, embeddings)."""

    def __init__(self, operation: Operation, state: GatewayState) -> None:
        self.operation = operation
        self.state = state
        self.path = "/v1/" + operation.value

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        ctx = context_of(scope)
        server = self.state.config.server
        body = await read_body(scope, receive, server.max_body_bytes)
        request = parse_request(self.operation, body, server.max_tokens_limit)
        ctx.model, ctx.stream = request.model, request.stream
        check_model(ctx.principal, request.model)  # one the key may not use: as if absent
        route = self.state.route(request.model)
        accounting, counters = self.state.accounting, self.state.routing.counters
        reservation = await accounting.admit(ctx, request, counters)
        request = accounting.ask_for_usage(ctx, request)
        with accounting.settling(ctx, request, reservation, counters):  # settle, record: always
            await self._watched(route, request, scope, receive, send, ctx)

    async def _watched(
        self,
        route: ModelRoute,
        request: ParsedRequest,
        scope: Scope,
        receive: Receive,
        send: Send,
        ctx: RequestContext,
    ) -> None:
        """The exchange, cancelled at once if the client goes away."""
        watch = DisconnectWatch(receive)
        try:
            await self._exchange(route, request, scope, send, ctx)
        except asyncio.CancelledError:
            if not watch.client_gone():
                raise
            ctx.client_disconnected = True
            ctx.status = CLIENT_CLOSED_REQUEST
            self.state.metrics.client_disconnects.labels(ctx.model, ctx.pool or "").inc()
        finally:
            watch.stop()

    async def _exchange(
        self,
        route: ModelRoute,
        request: ParsedRequest,
        scope: Scope,
        send: Send,
        ctx: RequestContext,
    ) -> None:
        """Route (variant, pool, replica; retries and failover inside), then relay the answer."""

        attempts = UpstreamAttempts(self.state.tracing, self.state.metrics, ctx, request)

        async def send_via(pool: Pool, replica: Replica, model: str | None) -> UpstreamResponse:
            headers = _upstream_headers(scope, pool, ctx)
            body = _upstream_body(request, model)
            client = self.state.clients[pool.name]
            with attempts.sending(replica.url) as attempt:  # one client span per attempt
                headers.extend(attempt.headers)  # its W3C traceparent
                return attempt.answered(await client.send(replica.url + self.path, headers, body))

        try:
            with attempts:  # the answering attempt ends after the relay, with its phase spans
                async with self.state.routing.serve(
                    route.router, request, scope, ctx, send_via
                ) as up:
                    await self._relay(up.response, send, ctx)
        except GatewayError as err:  # before the response started; mid-stream ones end the stream
            self._count_error(ctx, err)
            raise

    async def _relay(self, response: UpstreamResponse, send: Send, ctx: RequestContext) -> None:
        metrics = self.state.metrics
        clean = False
        try:
            if response.is_event_stream:
                await relay_stream(response, send, ctx, metrics)
            else:
                await relay_whole(response, send, ctx, metrics)
            clean = ctx.error_code is None
        finally:
            if clean:
                response.release()
            else:  # unread bytes or a cancelled read: the connection cannot be reused
                response.abort()

    def _count_error(self, ctx: RequestContext, err: GatewayError) -> None:
        ctx.error_code = err.code
        self.state.metrics.upstream_errors.labels(ctx.pool or "", err.code or "error").inc()


def _upstream_headers(scope: Scope, pool: Pool, ctx: RequestContext) -> list[tuple[bytes, bytes]]:
    headers = [(b"content-type", b"application/json"), (b"x-request-id", ctx.request_id.encode())]
    forwarded = pool.forward_headers
    if forwarded:
        headers.extend((k, v) for k, v in scope["headers"] if k in forwarded)
    return headers


def _upstream_body(request: ParsedRequest, upstream_model: str | None) -> bytes:
    """The body as the client sent it, unless the upstream knows the model by another name."""
    if upstream_model is None or upstream_model == request.model:
        return request.body
    return orjson.dumps({**request.payload, "model": upstream_model})
