"""The server span of each proxied request: a pure-ASGI layer just inside the request-id one.

It continues an incoming W3C ``traceparent``, makes its span current for the pipeline (so the
upstream attempt's client span is its child), and reads the request's facts from its one
:class:`Outcome` when the response is done. Health probes and ``/metrics`` are not traced.
"""

from __future__ import annotations

from collections.abc import Iterable
from ipaddress import ip_address

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.propagators.textmap import Getter
from opentelemetry.trace import Span, SpanKind, Status, StatusCode
from starlette.types import ASGIApp

from gateway.asgi import Receive, Scope, Send
from gateway.telemetry import attributes as attr
from gateway.telemetry.provider import Tracing
from gateway.telemetry.sampling import mark_untrusted
from gateway.wire.outcome import Ending, Outcome, outcome_slot

_TRACE_HEADERS = (b"traceparent", b"tracestate")


class _ScopeHeaders(Getter[Scope]):
    """Reads propagation headers straight from the ASGI scope (lower-case bytes pairs)."""

    def get(self, carrier: Scope, key: str) -> list[str] | None:
        wanted = key.encode("latin-1")
        found = [v.decode("latin-1") for k, v in carrier["headers"] if k == wanted]
        return found or None

    def keys(self, carrier: Scope) -> list[str]:
        return [k.decode("latin-1") for k, _ in carrier["headers"]]


_GETTER = _ScopeHeaders()


def incoming_context(scope: Scope, tracing: Tracing) -> Context | None:
    """The caller's trace context, when it sent one; most requests do not, and pay one scan.
    A caller outside the trusted networks has its context marked: its sampled flag is not
    followed (gateway/telemetry/sampling.py)."""
    for key, _ in scope["headers"]:
        if key in _TRACE_HEADERS:
            context = tracing.propagator.extract(scope, getter=_GETTER)
            return context if trusted(scope, tracing) else mark_untrusted(context)
    return None


def trusted(scope: Scope, tracing: Tracing) -> bool:
    networks = tracing.config.trusted_parent_networks
    client = scope.get("client")
    if not networks or not client:
        return False
    try:
        address = ip_address(client[0])
    except ValueError:
        return False
    return any(address in network for network in networks)


class ServerSpanMiddleware:
    """One ``SERVER`` span per request to ``traced_paths``, current while the pipeline runs::

    Middleware(ServerSpanMiddleware, tracing=state.tracing, traced_paths={"/v1/chat/completions"})
    """

    def __init__(self, app: ASGIApp, *, tracing: Tracing, traced_paths: Iterable[str]) -> None:
        self.app = app
        self.tracer = tracing.tracer
        self.tracing = tracing
        self.traced_paths = frozenset(traced_paths)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["path"] not in self.traced_paths:
            await self.app(scope, receive, send)
            return
        name = f"{scope['method']} {scope['path']}"
        span = self.tracer.start_span(
            name, context=incoming_context(scope, self.tracing), kind=SpanKind.SERVER
        )
        token = otel_context.attach(trace.set_span_in_context(span))
        try:
            await self.app(scope, receive, send)
        except BaseException as exc:
            if span.is_recording():
                span.set_attribute(attr.ERROR_TYPE, type(exc).__qualname__)
                span.set_status(Status(StatusCode.ERROR, type(exc).__qualname__))
            raise
        finally:
            otel_context.detach(token)
            outcome = outcome_slot(scope).value
            if span.is_recording() and outcome is not None:
                describe_request(span, scope, outcome)
            span.end()


def describe_request(span: Span, scope: Scope, outcome: Outcome) -> None:
    """The request's facts as attributes; only for spans being recorded (sampled)."""
    status, error = outcome.status, outcome.error_code
    span.set_attributes(
        {
            attr.HTTP_METHOD: scope["method"],
            attr.HTTP_ROUTE: scope["path"],
            attr.URL_PATH: scope["path"],
            attr.REQUEST_ID: outcome.arrival.request_id,
        }
    )
    if outcome.arrival.correlation_id is not None:
        span.set_attribute(attr.CORRELATION_ID, outcome.arrival.correlation_id)
    if status:
        span.set_attribute(attr.HTTP_STATUS, status)
    for key, value in request_facts(outcome).items():
        if value is not None:
            span.set_attribute(key, value)
    if outcome.band is not None:
        span.set_attribute(attr.PRIORITY_BAND, outcome.band)
        span.set_attribute(attr.QUEUE_WAIT, outcome.queued)
    if outcome.ending is Ending.CLIENT_GONE:
        span.set_attribute(attr.CLIENT_DISCONNECTED, True)
    if status >= 400 or error is not None:
        span.set_attribute(attr.ERROR_TYPE, error or str(status))
    if status >= 500:  # a 4xx is the client's doing, not a failed server span
        span.set_status(Status(StatusCode.ERROR, error or str(status)))


def request_facts(outcome: Outcome) -> dict[str, str | float | None]:
    """The gateway's own per-request attributes, shared by the server and client spans."""
    route = outcome.route
    return {
        attr.MODEL: outcome.model,
        attr.POOL: route.pool,
        attr.VARIANT: route.variant,
        attr.ROUTING_REASON: route.reason,
        attr.PREDICTED_TTFT: route.predicted_ttft_ms,
        attr.TENANT: outcome.tenant_id,
        attr.KEY_PUBLIC_ID: outcome.key_id,
    }


def current_trace_id() -> str | None:
    """The current span's trace id (32 hex digits) when it is sampled: the log line that finds
    the trace."""
    context = trace.get_current_span().get_span_context()
    return f"{context.trace_id:032x}" if context.is_valid and context.trace_flags.sampled else None
