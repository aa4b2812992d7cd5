"""Stage 6, relay: upstream bytes to the client as they arrive, never buffered or re-serialised.

An upstream that fails or stalls after the stream has started cannot change the status any more;
the stream then ends with an OpenAI-style error event, which the OpenAI SDKs raise as an error.
"""

from __future__ import annotations

import time

from gateway.asgi import JSON, Send, send_response
from gateway.context import RequestContext
from gateway.errors import GatewayError
from gateway.metrics import GatewayMetrics
from gateway.proxy.sse import StreamMeter
from gateway.proxy.upstream import UpstreamResponse


async def relay_stream(
    response: UpstreamResponse, send: Send, ctx: RequestContext, metrics: GatewayMetrics
) -> None:
    await send(
        {
            "type": "http.response.start",
            "status": response.status,
            "headers": response.relay_headers(),
        }
    )
    meter = ctx.meter = StreamMeter(strip_usage=ctx.strip_usage)
    first = True
    try:
        async for chunk in response.chunks():
            if first:
                first = False
                _first_byte(ctx, metrics)
            out = meter.feed(chunk)
            if out:
                await send({"type": "http.response.body", "body": out, "more_body": True})
    except GatewayError as err:
        ctx.error_code = err.code
        metrics.upstream_errors.labels(ctx.pool or "", err.code or "error").inc()
        await send({"type": "http.response.body", "body": err.sse_event(), "more_body": True})
    await send({"type": "http.response.body", "body": meter.flush(), "more_body": False})


async def relay_whole(
    response: UpstreamResponse, send: Send, ctx: RequestContext, metrics: GatewayMetrics
) -> None:
    """A non-streaming answer: read it whole (it is one JSON document), then send it."""
    body = await response.read()
    _first_byte(ctx, metrics)
    ctx.meter = StreamMeter()
    ctx.meter.observe_document(body)
    headers = response.relay_headers()
    content_type = next((v for k, v in headers if k == b"content-type"), JSON)
    others = [h for h in headers if h[0] != b"content-type"]
    await send_response(send, response.status, body, content_type, others)


def _first_byte(ctx: RequestContext, metrics: GatewayMetrics) -> None:
    ctx.time_to_first_byte = time.perf_counter() - ctx.started
    metrics.time_to_first_byte_by(ctx.model or "", ctx.pool or "").observe(ctx.time_to_first_byte)
