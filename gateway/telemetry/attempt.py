"""Client spans for the upstream attempts of one request, ``prefill``/``decode`` children for the
attempt that answered, and the per-phase metrics, all from facts the pipeline already has::

    with UpstreamAttempts(tracing, metrics, ctx, request) as attempts:
        ...                                               # routing, retries
        with attempts.sending(replica.url) as attempt:    # one client span per attempt
            headers.extend(attempt.headers)               # W3C traceparent of this attempt
            return attempt.answered(await client.send(url, headers, body))
        ...                                               # relay (fills ctx.meter)

A failed send ends its attempt's span at once. The attempt that answered stays open until the
block ends; then the relay's meter (``ctx.meter``) gives its phase spans, made after the fact
with explicit start and end times so a stream costs no span work per chunk. Spans that are not
sampled skip all attribute work (``is_recording``); metrics are recorded for every request.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from types import TracebackType
from typing import Protocol, TypeVar
from urllib.parse import urlsplit

import orjson
from opentelemetry.trace import Span, SpanKind, Status, StatusCode, set_span_in_context
from opentelemetry.util.types import AttributeValue

from gateway.context import RequestContext
from gateway.errors import GatewayError
from gateway.metrics import GatewayMetrics
from gateway.proxy.parse import Operation, ParsedRequest
from gateway.proxy.sse import StreamMeter
from gateway.telemetry import attributes as attr
from gateway.telemetry.phases import Phases, phases_of
from gateway.telemetry.provider import Tracing
from gateway.telemetry.server import request_facts

GEN_AI_OPERATION = {
    Operation.CHAT: "chat",
    Operation.COMPLETION: "text_completion",
    Operation.EMBEDDING: "embeddings",
}
_CONTENT_FIELDS = ("messages", "prompt", "input")
TraceHeaders = tuple[tuple[bytes, bytes], ...]


class _Answer(Protocol):
    status: int


AnswerT = TypeVar("AnswerT", bound=_Answer)


class UpstreamAttempts:
    """The upstream attempts of one request (see the module's docstring for use)."""

    __slots__ = ("_answered", "_ctx", "_metrics", "_request", "_tracing")

    def __init__(
        self, tracing: Tracing, metrics: GatewayMetrics, ctx: RequestContext, request: ParsedRequest
    ) -> None:
        self._tracing = tracing
        self._metrics = metrics
        self._ctx = ctx
        self._request = request
        self._answered: _Attempt | None = None

    def __enter__(self) -> UpstreamAttempts:
        return self

    @contextmanager
    def sending(self, url: str) -> Iterator[_Attempt]:
        """One attempt: its client span starts here; ``attempt.headers`` carry its traceparent."""
        attempt = _Attempt(self._tracing, self._ctx, self._request, url)
        try:
            yield attempt
        except BaseException as exc:
            attempt.end(exc, time.perf_counter(), None)
            raise
        if self._answered is not None:  # answered (a 5xx), yet retried: it ends here
            self._answered.end(None, time.perf_counter(), None)
        self._answered = attempt

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        ended_at = time.perf_counter()
        phases = None
        meter = self._ctx.meter
        if meter is not None and self._answered is not None:
            phases = phases_of(
                meter,
                streamed=self._request.stream,
                sent_at=self._answered.sent_at,
                ended_at=ended_at,
            )
            observe_phases(self._metrics, self._ctx, phases)
        if self._answered is not None:
            self._answered.end(exc, ended_at, phases)


class _Attempt:
    """The client span of one attempt, named ``{operation} {model}`` (``chat qwen``)."""

    __slots__ = (
        "_ctx",
        "_request",
        "_tracing",
        "_url",
        "_wall_ns",
        "headers",
        "sent_at",
        "span",
        "status",
    )

    def __init__(
        self, tracing: Tracing, ctx: RequestContext, request: ParsedRequest, url: str
    ) -> None:
        self._tracing = tracing
        self._ctx = ctx
        self._request = request
        self._url = url
        self._wall_ns = time.time_ns()
        self.sent_at = time.perf_counter()
        operation = GEN_AI_OPERATION[request.operation]
        self.span = tracing.tracer.start_span(
            f"{operation} {request.model}", kind=SpanKind.CLIENT, start_time=self._wall_ns
        )
        self.headers: TraceHeaders = ()
        self.status = 0
        if self.span.get_span_context().is_valid:  # an unsampled trace still propagates
            carrier: dict[str, str] = {}
            tracing.propagator.inject(carrier, set_span_in_context(self.span))
            self.headers = tuple((k.encode(), v.encode()) for k, v in carrier.items())

    def answered(self, response: AnswerT) -> AnswerT:
        """Note the upstream's status; returns the response unchanged."""
        self.status = response.status
        return response

    def end(self, exc: BaseException | None, ended_at: float, phases: Phases | None) -> None:
        span = self.span
        if span.is_recording():
            self._describe(span, exc, phases is not None)
            if phases is not None:
                self._phase_spans(span, phases)
        span.end(end_time=self._ns(ended_at))

    def _ns(self, perf: float) -> int:
        """A perf_counter reading as the epoch nanoseconds spans use."""
        return self._wall_ns + int((perf - self.sent_at) * 1e9)

    def _describe(self, span: Span, exc: BaseException | None, answered: bool) -> None:
        # One dict, one set_attributes: each SDK call takes a lock and validates.
        request, ctx = self._request, self._ctx
        where = urlsplit(self._url)
        found: dict[str, AttributeValue | None] = {
            attr.OPERATION_NAME: GEN_AI_OPERATION[request.operation],
            attr.PROVIDER_NAME: self._tracing.config.provider_name,
            attr.REQUEST_MODEL: request.model,
            attr.REQUEST_STREAM: request.stream,
            attr.REQUEST_MAX_TOKENS: request.max_tokens,
            attr.SERVER_ADDRESS: where.hostname or "",
            attr.SERVER_PORT: where.port,
            attr.REPLICA: self._url,
            attr.REQUEST_ID: ctx.request_id,
            attr.HTTP_STATUS: self.status or None,
            **request_facts(ctx),
        }
        if self._tracing.config.capture_content:
            found[attr.INPUT_MESSAGES] = self._content()
        if answered and ctx.meter is not None:
            found.update(_response_facts(ctx.meter))
        error = _error_type(exc, ctx if answered else None, self.status)
        if error is not None:
            found[attr.ERROR_TYPE] = error
            span.set_status(Status(StatusCode.ERROR, error))
        span.set_attributes({k: v for k, v in found.items() if v is not None})

    def _content(self) -> str:
        payload = self._request.payload
        field = next((f for f in _CONTENT_FIELDS if f in payload), None)
        text = "" if field is None else orjson.dumps(payload[field]).decode()
        return text[: self._tracing.config.max_content_chars]

    def _phase_spans(self, parent: Span, phases: Phases) -> None:
        tracer, context = self._tracing.tracer, set_span_in_context(parent)
        tokens = _token_facts(phases)
        if not phases.split:
            whole = {
                **tokens,
                attr.TOKENS_PER_SECOND_LOWER_BOUND: phases.tokens_per_second_lower_bound,
            }
            span = tracer.start_span(
                "generate", context, attributes=_present(whole), start_time=self._ns(phases.sent_at)
            )
            span.end(end_time=self._ns(phases.ended_at))
            return
        assert phases.first_token_at is not None and phases.last_token_at is not None
        prefill = {
            attr.PHASE_MEASURED: phases.measured,
            attr.USAGE_INPUT_TOKENS: phases.input_tokens,
        }
        span = tracer.start_span(
            "prefill", context, attributes=_present(prefill), start_time=self._ns(phases.sent_at)
        )
        span.end(end_time=self._ns(phases.first_token_at))
        decode = {
            **tokens,
            attr.CONTENT_CHUNKS: phases.content_chunks,
            attr.TOKENS_PER_SECOND: phases.tokens_per_second,
        }
        span = tracer.start_span(
            "decode",
            context,
            attributes=_present(decode),
            start_time=self._ns(phases.first_token_at),
        )
        span.end(end_time=self._ns(phases.last_token_at))


def _present(facts: Mapping[str, AttributeValue | None]) -> dict[str, AttributeValue]:
    return {k: v for k, v in facts.items() if v is not None}


def _token_facts(phases: Phases) -> dict[str, AttributeValue | None]:
    if phases.output_tokens is None:
        return {attr.PHASE_MEASURED: phases.measured}
    source = "upstream" if phases.usage_from_upstream else "content_chunks"
    return {
        attr.PHASE_MEASURED: phases.measured,
        attr.USAGE_OUTPUT_TOKENS: phases.output_tokens,
        attr.USAGE_SOURCE: source,
    }


def _response_facts(meter: StreamMeter) -> dict[str, AttributeValue | None]:
    usage = meter.usage or {}
    facts: dict[str, AttributeValue | None] = {
        attr.RESPONSE_ID: meter.response_id or None,
        attr.RESPONSE_MODEL: meter.response_model or None,
        attr.RESPONSE_FINISH_REASONS: meter.finish_reasons or None,
    }
    for key, name in (
        (attr.USAGE_INPUT_TOKENS, "prompt_tokens"),
        (attr.USAGE_OUTPUT_TOKENS, "completion_tokens"),
    ):
        value = usage.get(name)
        if isinstance(value, int):
            facts[key] = value
    return facts


def _error_type(exc: BaseException | None, ctx: RequestContext | None, status: int) -> str | None:
    """Low-cardinality: the gateway's error code, ``cancelled``, or the upstream's status.

    ``ctx`` is given for the attempt that answered the client: its relay's failures count too.
    """
    if isinstance(exc, GatewayError):
        return exc.code or type(exc).__name__
    if isinstance(exc, asyncio.CancelledError):
        return "cancelled"
    if exc is not None:
        return type(exc).__qualname__
    if ctx is not None and ctx.error_code is not None:  # a failure after the stream started
        return ctx.error_code
    if status >= 400:
        return str(status)
    return None


def observe_phases(metrics: GatewayMetrics, ctx: RequestContext, phases: Phases) -> None:
    """Time to first token, time per output token and token counts, for every request."""
    model, pool = ctx.model or "", ctx.pool or ""
    if phases.first_token_at is not None:
        metrics.time_to_first_token_by(
            model, pool, prompt_length_band(phases.input_tokens)
        ).observe(phases.first_token_at - ctx.started)
    per_token = phases.time_per_output_token
    if per_token is not None:
        metrics.time_per_output_token_by(model, pool).observe(per_token)
    tenant = ctx.tenant_id or ""
    if phases.input_tokens:
        metrics.tokens_by(tenant, model, "input").inc(phases.input_tokens)
    if phases.output_tokens:
        metrics.tokens_by(tenant, model, "output").inc(phases.output_tokens)


# Upper bounds of prompt-length bands (tokens): a bounded label for TTFT versus prompt length.
_BANDS = ((256, "0-256"), (1024, "256-1k"), (4096, "1k-4k"), (16384, "4k-16k"))


def prompt_length_band(tokens: int | None) -> str:
    if tokens is None:
        return "unknown"
    for bound, name in _BANDS:
        if tokens <= bound:
            return name
    return "16k+"
