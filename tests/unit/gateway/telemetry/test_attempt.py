"""Client spans per upstream attempt, their prefill/decode children, and the per-phase metrics."""

from __future__ import annotations

import time
from dataclasses import dataclass

import orjson
import pytest
from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.sdk.trace.sampling import ParentBased, TraceIdRatioBased
from opentelemetry.trace import NoOpTracer, SpanKind, StatusCode
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from gateway.errors import UpstreamTimeout
from gateway.metrics import GatewayMetrics
from gateway.proxy.record import observe
from gateway.telemetry import Tracing, TracingConfig
from gateway.telemetry.attempt import UpstreamAttempts
from gateway.wire.meter import StreamMeter
from gateway.wire.outcome import Arrival, Ending, Outcome, RouteFacts
from gateway.wire.request import Operation, ParsedRequest, parse_request
from gateway.wire.usage import settle_usage
from tests.unit.gateway.telemetry.meters import StepClock, streamed_meter

URL = "http://127.0.0.1:8123"


def chat(stream: bool = True, **extra: object) -> ParsedRequest:
    body = {"model": "m", "messages": [{"role": "user", "content": "secret prompt"}]}
    return parse_request(
        Operation.CHAT, orjson.dumps({**body, "stream": stream, **extra}), 1_000_000
    )


def arrival() -> Arrival:
    return Arrival("req-1", None, time.perf_counter(), time.time())


def finish(
    attempts: UpstreamAttempts,
    came: Arrival,
    request: ParsedRequest,
    meter: StreamMeter,
    *,
    tenant: str | None = None,
    key: str | None = None,
    variant: str = "default",
    reason: str = "single_pool",
    metrics: GatewayMetrics | None = None,
) -> Outcome:
    """End the attempts with the outcome the pipeline would build from ``meter``."""
    delivered = meter.delivered(
        status=200, upstream_status=200, first_byte_at=time.perf_counter(), error_code=None
    )
    usage = settle_usage(
        reported=delivered.upstream_usage,
        reached=True,
        complete=True,
        prompt_tokens=lambda: 5,
        output_text="",
        content_events=delivered.content_events,
        count_text=None,
    )
    outcome = Outcome(
        came, "POST", "/v1/chat/completions", request.operation, "m", request.stream,
        tenant, key, RouteFacts(variant, "pd", URL, reason), delivered, Ending.COMPLETE,
        True, True, usage, 5, time.perf_counter(),
    )  # fmt: skip
    attempts.end(outcome)
    if metrics is not None:
        observe(metrics, outcome)
    return outcome


def clients(exporter: InMemorySpanExporter) -> list[ReadableSpan]:
    """The attempts' client spans (the answering one also has a phase span child)."""
    return [s for s in exporter.get_finished_spans() if s.kind is SpanKind.CLIENT]


def by_name(spans: tuple[ReadableSpan, ...]) -> dict[str, ReadableSpan]:
    return {s.name: s for s in spans}


def sample(metrics: GatewayMetrics, name: str, **labels: str) -> float | None:
    registry = metrics.tenant_registry if "tenant" in labels else metrics.registry
    return registry.get_sample_value(name, labels)


def test_stream_gives_client_span_with_prefill_and_decode_children(
    tracing: Tracing, exporter: InMemorySpanExporter
) -> None:
    metrics = GatewayMetrics()
    came, request = arrival(), chat(max_tokens=64)
    server = tracing.tracer.start_span("POST /v1/chat/completions", kind=SpanKind.SERVER)
    token = otel_context.attach(trace.set_span_in_context(server))
    before = time.perf_counter()
    attempts = UpstreamAttempts(tracing, came, request)
    with attempts.sending(URL) as attempt:
        pass
    time.sleep(0.06)  # the meter's tokens came 30-40 ms after sending
    meter = streamed_meter(StepClock(), first_at=before + 0.03, gap=0.001, tokens=11)
    finish(
        attempts, came, request, meter,
        tenant="acme", key="k_pub1", variant="canary", reason="long", metrics=metrics,
    )  # fmt: skip
    otel_context.detach(token)
    server.end()

    spans = by_name(exporter.get_finished_spans())
    client, prefill, decode = spans["chat m"], spans["prefill"], spans["decode"]
    assert client.kind is SpanKind.CLIENT
    assert client.parent is not None and client.parent.span_id == server.get_span_context().span_id
    assert prefill.parent == client.context and decode.parent == client.context
    assert prefill.start_time == client.start_time
    assert prefill.end_time == decode.start_time
    assert (prefill.end_time - prefill.start_time) / 1e9 == pytest.approx(0.03, abs=0.005)
    assert (decode.end_time - decode.start_time) / 1e9 == pytest.approx(0.01, abs=0.001)
    assert decode.end_time <= client.end_time

    a = client.attributes
    assert a["gen_ai.operation.name"] == "chat"
    assert a["gen_ai.provider.name"] == "vllm"
    assert a["gen_ai.request.model"] == "m"
    assert a["gen_ai.request.max_tokens"] == 64
    assert a["gen_ai.request.stream"] is True
    assert a["gen_ai.response.model"] == "up-model"
    assert a["gen_ai.response.id"] == "chatcmpl-1"
    assert a["gen_ai.response.finish_reasons"] == ("stop",)
    assert (a["gen_ai.usage.input_tokens"], a["gen_ai.usage.output_tokens"]) == (300, 11)
    assert (a["server.address"], a["server.port"]) == ("127.0.0.1", 8123)
    assert a["gateway.tenant"] == "acme" and a["gateway.key.public_id"] == "k_pub1"
    assert a["gateway.variant"] == "canary" and a["gateway.routing.reason"] == "long"
    assert "error.type" not in a
    assert "gen_ai.input.messages" not in a  # prompts only when capture_content is on
    assert "secret prompt" not in repr(dict(a))
    assert decode.attributes["gen_ai.usage.output_tokens"] == 11
    assert decode.attributes["gateway.decode.tokens_per_second"] == pytest.approx(1000, rel=0.01)
    assert prefill.attributes["gen_ai.usage.input_tokens"] == 300

    # The traceparent sent upstream names this attempt's span.
    traceparent = dict(attempt.headers)[b"traceparent"].decode()
    span_context = client.context
    version, trace_id, span_id, flags = traceparent.split("-")
    assert (version, trace_id, span_id) == (
        "00",
        f"{span_context.trace_id:032x}",
        f"{span_context.span_id:016x}",
    )
    assert int(flags, 16) & 1  # sampled

    ttft = sample(
        metrics,
        "gen_ai_server_time_to_first_token_seconds_count",
        model="m",
        pool="pd",
        prompt_length="256-1k",
    )
    assert ttft == 1
    assert (
        sample(metrics, "gen_ai_server_time_per_output_token_seconds_count", model="m", pool="pd")
        == 1
    )
    assert (
        sample(metrics, "gateway_tokens_total", tenant="acme", model="m", direction="output") == 11
    )


def test_a_failed_attempt_ends_its_own_span_with_the_error_and_the_retry_answers(
    tracing: Tracing, exporter: InMemorySpanExporter
) -> None:
    came, request = arrival(), chat(stream=False)
    attempts = UpstreamAttempts(tracing, came, request)
    with pytest.raises(UpstreamTimeout), attempts.sending("http://10.0.0.1:1"):
        raise UpstreamTimeout("too slow")
    with attempts.sending("http://10.0.0.2:2"):
        pass
    finish(attempts, came, request, StreamMeter())  # the relay delivered nothing
    first, second = clients(exporter)
    assert first.attributes["error.type"] == "timeout"
    assert first.status.status_code is StatusCode.ERROR
    assert first.attributes["server.address"] == "10.0.0.1"
    assert second.attributes["server.address"] == "10.0.0.2"
    assert "error.type" not in second.attributes
    assert first.end_time <= second.start_time


def test_whole_response_gets_one_generate_span_that_says_it_is_not_split(
    tracing: Tracing, exporter: InMemorySpanExporter
) -> None:
    came, request = arrival(), chat(stream=False)
    attempts = UpstreamAttempts(tracing, came, request)
    with attempts.sending(URL):
        pass
    meter = StreamMeter()
    meter.observe_document(b'{"id":"x","usage":{"prompt_tokens":3,"completion_tokens":9}}')
    finish(attempts, came, request, meter)
    spans = by_name(exporter.get_finished_spans())
    assert "prefill" not in spans and "decode" not in spans
    generate = spans["generate"]
    assert generate.attributes["gateway.phase.measured"] == "whole_response"
    assert generate.attributes["gen_ai.usage.output_tokens"] == 9


def test_capture_content_records_the_prompt_only_when_enabled(
    exporter: InMemorySpanExporter,
) -> None:
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    config = TracingConfig(enabled=True, capture_content=True, max_content_chars=20)
    tracing = Tracing(provider.get_tracer("t"), TraceContextTextMapPropagator(), config, provider)
    came, request = arrival(), chat()
    attempts = UpstreamAttempts(tracing, came, request)
    with attempts.sending(URL):
        pass
    finish(attempts, came, request, StreamMeter())
    (span,) = clients(exporter)
    assert span.attributes["gen_ai.input.messages"] == '[{"role":"user","con'


def test_disabled_tracing_records_metrics_and_sends_no_traceparent() -> None:
    tracing = Tracing(NoOpTracer(), TraceContextTextMapPropagator(), TracingConfig())
    metrics = GatewayMetrics()
    came, request = arrival(), chat()
    before = time.perf_counter()
    attempts = UpstreamAttempts(tracing, came, request)
    with attempts.sending(URL) as attempt:
        pass
    meter = streamed_meter(StepClock(), first_at=before, gap=0.0, tokens=2)
    finish(attempts, came, request, meter, metrics=metrics)
    assert attempt.headers == ()
    labels = {"model": "m", "pool": "pd", "prompt_length": "256-1k"}
    assert sample(metrics, "gen_ai_server_time_to_first_token_seconds_count", **labels) == 1


def test_an_incoming_trace_is_still_propagated_when_tracing_is_disabled() -> None:
    tracing = Tracing(NoOpTracer(), TraceContextTextMapPropagator(), TracingConfig())
    incoming = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
    parent = TraceContextTextMapPropagator().extract({"traceparent": incoming})
    token = otel_context.attach(parent)
    try:
        attempts = UpstreamAttempts(tracing, arrival(), chat())
        with attempts.sending(URL) as attempt:
            pass
    finally:
        otel_context.detach(token)
    assert dict(attempt.headers)[b"traceparent"] == incoming.encode()


def test_unsampled_requests_export_nothing_but_propagate_the_decision(
    exporter: InMemorySpanExporter,
) -> None:
    provider = TracerProvider(sampler=ParentBased(TraceIdRatioBased(0.0)))
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracing = Tracing(
        provider.get_tracer("t"), TraceContextTextMapPropagator(), TracingConfig(), provider
    )
    came, request = arrival(), chat()
    attempts = UpstreamAttempts(tracing, came, request)
    with attempts.sending(URL) as attempt:
        pass
    finish(attempts, came, request, StreamMeter())
    assert exporter.get_finished_spans() == ()
    flags = dict(attempt.headers)[b"traceparent"].decode().rsplit("-", 1)[1]
    assert not int(flags, 16) & 1  # not sampled: the upstream will not record it either


@dataclass
class Answer:
    status: int


def test_an_answered_5xx_that_is_retried_ends_with_its_status(
    tracing: Tracing, exporter: InMemorySpanExporter
) -> None:
    came, request = arrival(), chat()
    attempts = UpstreamAttempts(tracing, came, request)
    with attempts.sending("http://10.0.0.1:1") as attempt:
        assert attempt.answered(Answer(503)).status == 503
    with attempts.sending("http://10.0.0.2:2") as attempt:
        attempt.answered(Answer(200))
    finish(attempts, came, request, StreamMeter())
    retried, answered = clients(exporter)
    assert retried.attributes["error.type"] == "503"
    assert retried.attributes["http.response.status_code"] == 503
    assert answered.attributes["http.response.status_code"] == 200
    assert "error.type" not in answered.attributes
