"""Client spans for the upstream attempts of one request, ``prefill``/``decode`` children for the
attempt that answered, and the per-phase metrics, all from facts the pipeline already has::

    attempts = UpstreamAttempts(tracing, arrival, request)
    ...                                                   # routing, retries
    with attempts.sending(replica.url) as attempt:        # one client span per attempt
        headers.extend(attempt.headers)                   # W3C traceparent of this attempt
        return attempt.answered(await client.send(url, headers, body))
    ...                                                   # relay, settle
    attempts.end(outcome)                                 # the answering attempt, its phases

A failed send ends its attempt's span at once. The attempt that answered stays open until the
request's outcome is known; its phase spans are made then, after the fact, with explicit start and
end times, so a stream costs no span work per chunk. Spans that are not sampled skip all attribute
work (``is_recording``). The per-phase metrics come from the same outcome (gateway/proxy/record.py).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Protocol, TypeVar
from urllib.parse import urlsplit

import orjson
from opentelemetry.trace import (
    INVALID_SPAN,
    Span,
    SpanKind,
    Status,
    StatusCode,
    get_current_span,
    set_span_in_context,
)
from opentelemetry.util.types import AttributeValue

from gateway.errors import GatewayError
from gateway.telemetry import attributes as attr
from gateway.telemetry.phases import Phases, phases_of
from gateway.telemetry.provider import Tracing
from gateway.telemetry.server import request_facts
from gateway.wire.outcome import Arrival, Outcome
from gateway.wire.request import Operation, ParsedRequest
from gateway.wire.usage import UsageSource

GEN_AI_OPERATION = {
    Operation.CHAT: "chat",
    Operation.COMPLETION: "text_completion",
    Operation.EMBEDDING: "embeddings",
    Operation.RESPONSES: "chat",  # what the upstream is asked for (GenAI semantic conventions)
}
_CONTENT_FIELDS = ("messages", "prompt", "input")
TraceHeaders = tuple[tuple[bytes, bytes], ...]


class _Answer(Protocol):
    status: int


AnswerT = TypeVar("AnswerT", bound=_Answer)


class UpstreamAttempts:
    """The upstream attempts of one request (see the module's docstring for use)."""

    __slots__ = ("_answered", "_arrival", "_request", "_tracing")

    def __init__(self, tracing: Tracing, arrival: Arrival, request: ParsedRequest) -> None:
        self._tracing = tracing
        self._arrival = arrival
        self._request = request
        self._answered: _Attempt | None = None

    @contextmanager
    def sending(self, url: str) -> Iterator[_Attempt]:
        """One attempt: its client span starts here; ``attempt.headers`` carry its traceparent."""
        attempt = _Attempt(self._tracing, self._arrival, self._request, url)
        try:
            yield attempt
        except BaseException as exc:
            attempt.end(exc, time.perf_counter(), None)
            raise
        if self._answered is not None:  # answered (a 5xx), yet retried: it ends here
            self._answered.end(None, time.perf_counter(), None)
        self._answered = attempt

    def end(self, outcome: Outcome) -> None:
        """End the attempt that answered, with the request's outcome and its phase spans."""
        answered, self._answered = self._answered, None
        if answered is None:
            return
        if not answered.span.is_recording():  # tracing off, or not sampled: nothing to describe
            answered.span.end()
            return
        phases = phases_of(outcome, sent_at=answered.sent_at)
        answered.end(None, outcome.finished, phases, outcome)


class _Attempt:
    """The client span of one attempt, named ``{operation} {model}`` (``chat qwen``)."""

    __slots__ = (
        "_arrival",
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
        self, tracing: Tracing, arrival: Arrival, request: ParsedRequest, url: str
    ) -> None:
        self._tracing = tracing
        self._arrival = arrival
        self._request = request
        self._url = url
        self._wall_ns = time.time_ns()
        self.sent_at = time.perf_counter()
        self.headers: TraceHeaders = ()
        self.status = 0
        if tracing.provider is None and not get_current_span().get_span_context().is_valid:
            # Tracing off and no trace to carry on: the no-op tracer's span would still cost a
            # span object and context lookups every request, to propagate nothing.
            self.span: Span = INVALID_SPAN
            return
        operation = GEN_AI_OPERATION[request.operation]
        self.span = tracing.tracer.start_span(
            f"{operation} {request.model}", kind=SpanKind.CLIENT, start_time=self._wall_ns
        )
        if self.span.get_span_context().is_valid:  # an unsampled trace still propagates
            carrier: dict[str, str] = {}
            tracing.propagator.inject(carrier, set_span_in_context(self.span))
            self.headers = tuple((k.encode(), v.encode()) for k, v in carrier.items())

    def answered(self, response: AnswerT) -> AnswerT:
        """Note the upstream's status; returns the response unchanged."""
        self.status = response.status
        return response

    def end(
        self,
        exc: BaseException | None,
        ended_at: float,
        phases: Phases | None,
        outcome: Outcome | None = None,
    ) -> None:
        span = self.span
        if span.is_recording():
            self._describe(span, exc, outcome)
            if phases is not None:
                self._phase_spans(span, phases)
        span.end(end_time=self._ns(ended_at))

    def _ns(self, perf: float) -> int:
        """A perf_counter reading as the epoch nanoseconds spans use."""
        return self._wall_ns + int((perf - self.sent_at) * 1e9)

    def _describe(self, span: Span, exc: BaseException | None, outcome: Outcome | None) -> None:
        # One dict, one set_attributes: each SDK call takes a lock and validates.
        request = self._request
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
            attr.REQUEST_ID: self._arrival.request_id,
            attr.CORRELATION_ID: self._arrival.correlation_id,
            attr.HTTP_STATUS: self.status or None,
        }
        if self._tracing.config.capture_content:
            found[attr.INPUT_MESSAGES] = self._content()
        if outcome is not None:
            found.update(request_facts(outcome))
            found.update(_response_facts(outcome))
        error = _error_type(exc, outcome, self.status)
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


def _response_facts(outcome: Outcome) -> dict[str, AttributeValue | None]:
    delivered, usage = outcome.delivered, outcome.usage
    facts: dict[str, AttributeValue | None] = {
        attr.RESPONSE_ID: delivered.response_id,
        attr.RESPONSE_MODEL: delivered.response_model,
        attr.RESPONSE_FINISH_REASONS: list(delivered.finish_reasons) or None,
    }
    if usage.source is UsageSource.UPSTREAM:
        facts[attr.USAGE_INPUT_TOKENS] = usage.input_tokens
        facts[attr.USAGE_OUTPUT_TOKENS] = usage.output_tokens
    return facts


def _error_type(exc: BaseException | None, outcome: Outcome | None, status: int) -> str | None:
    """Low-cardinality: the gateway's error code, ``cancelled``, or the upstream's status.

    ``outcome`` is given for the attempt that answered the client: its relay's failures count.
    """
    if isinstance(exc, GatewayError):
        return exc.code or type(exc).__name__
    if isinstance(exc, asyncio.CancelledError):
        return "cancelled"
    if exc is not None:
        return type(exc).__qualname__
    if outcome is not None and outcome.error_code is not None:  # failed after the answer began
        return outcome.error_code
    if status >= 400:
        return str(status)
    return None


# Upper bounds of prompt-length bands (tokens): a bounded label for TTFT versus prompt length.
_BANDS = ((256, "0-256"), (1024, "256-1k"), (4096, "1k-4k"), (16384, "4k-16k"))


def prompt_length_band(tokens: int | None) -> str:
    if tokens is None:
        return "unknown"
    for bound, name in _BANDS:
        if tokens <= bound:
            return name
    return "16k+"
