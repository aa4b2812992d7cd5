"""build_tracing: config first, OTEL_* for what the config leaves open, off means no-op."""

from __future__ import annotations

import threading
from collections.abc import Sequence

import pytest
from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter as GrpcExporter
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter as HttpExporter
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace import Tracer as SdkTracer
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult
from opentelemetry.trace import NoOpTracer
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from gateway.config import parse_config
from gateway.telemetry import Tracing, TracingConfig, build_tracing
from gateway.telemetry.export import resolve_protocol, span_exporter
from gateway.telemetry.sampling import EdgeSampler

MINIMAL = {"pools": {"p": {"urls": ["http://127.0.0.1:1"]}}, "models": {"m": {"pool": "p"}}}


def test_tracing_is_off_unless_the_config_turns_it_on() -> None:
    assert parse_config(MINIMAL, env={}).tracing.enabled is False
    tracing = build_tracing(TracingConfig(), {})
    assert isinstance(tracing.tracer, NoOpTracer)
    tracing.shutdown()  # nothing to flush, must not fail


@pytest.mark.parametrize(
    "env", [{"OTEL_SDK_DISABLED": "true"}, {"OTEL_TRACES_EXPORTER": "none"}], ids=str
)
def test_standard_variables_switch_tracing_off(env: dict[str, str]) -> None:
    tracing = build_tracing(TracingConfig(enabled=True), env)
    assert isinstance(tracing.tracer, NoOpTracer)


def test_enabled_tracing_builds_an_sdk_tracer_with_the_configured_service_and_ratio() -> None:
    config = TracingConfig(enabled=True, endpoint="http://127.0.0.1:1", sampling_ratio=0.25)
    tracing = build_tracing(config, {"OTEL_SERVICE_NAME": "from-env"})
    try:
        assert isinstance(tracing.tracer, SdkTracer)
        assert tracing.provider is not None
        assert tracing.provider.resource.attributes["service.name"] == "from-env"
        sampler = tracing.provider.sampler
        assert isinstance(sampler, EdgeSampler)
        assert "0.25" in sampler.get_description()
    finally:
        tracing.shutdown()


def test_the_config_section_is_strict() -> None:
    with pytest.raises(Exception, match="sampling_ratio"):
        parse_config({**MINIMAL, "tracing": {"enabled": True, "sampling_ratio": 2}}, env={})
    with pytest.raises(Exception, match="endpont"):
        parse_config({**MINIMAL, "tracing": {"endpont": "x"}}, env={})


def test_protocol_comes_from_config_then_traces_variable_then_general_variable() -> None:
    assert resolve_protocol("grpc", {"OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf"}) == "grpc"
    env = {"OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "grpc", "OTEL_EXPORTER_OTLP_PROTOCOL": "x"}
    assert resolve_protocol(None, env) == "grpc"
    assert resolve_protocol(None, {"OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"}) == "grpc"
    assert resolve_protocol(None, {}) == "http/protobuf"
    with pytest.raises(ValueError, match="http/json"):
        resolve_protocol(None, {"OTEL_EXPORTER_OTLP_PROTOCOL": "http/json"})


def test_the_protocol_picks_the_exporter() -> None:
    exporter = span_exporter("http/protobuf", "http://collector:4318/")
    assert isinstance(exporter, HttpExporter)
    exporter.shutdown()
    grpc_exporter = span_exporter("grpc", "http://collector:4317")
    assert isinstance(grpc_exporter, GrpcExporter)
    grpc_exporter.shutdown()


STUCK_SECONDS = 10.0
"""How long a stuck export lasts unless shut down: the OTLP exporters' own export timeout."""


class StuckExporter(SpanExporter):
    """Exports that hang, as retries to an unreachable collector do, until the exporter is shut
    down (which is what ends the OTLP exporters' retries)."""

    def __init__(self) -> None:
        self.exporting = threading.Event()
        self.stopped = threading.Event()
        self.in_flight = False
        self.abandoned = False
        """Shut down while an export hung: whoever shut it down did not wait for the export."""
        self.exported = 0
        """Spans whose export finished (only if nothing shut the exporter down in time)."""

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        self.in_flight = True
        self.exporting.set()
        stopped = self.stopped.wait(STUCK_SECONDS)
        self.in_flight = False
        if stopped:
            return SpanExportResult.FAILURE
        self.exported += len(spans)
        return SpanExportResult.SUCCESS

    def shutdown(self) -> None:
        self.abandoned = self.abandoned or self.in_flight
        self.stopped.set()


def test_shutdown_abandons_an_export_stuck_on_an_unreachable_collector() -> None:
    exporter = StuckExporter()
    provider = TracerProvider()
    provider.add_span_processor(BatchSpanProcessor(exporter, schedule_delay_millis=1))
    config = TracingConfig(enabled=True, shutdown_timeout=0.05)
    propagator = TraceContextTextMapPropagator()
    tracing = Tracing(provider.get_tracer("t"), propagator, config, provider, exporter)
    tracing.tracer.start_span("request").end()
    assert exporter.exporting.wait(STUCK_SECONDS)  # the batch went out; its export hangs
    tracing.shutdown()
    # Returned with the export still hanging (only a shutdown ends it): the flush was bounded,
    # then the exporter shut down under it; the span is dropped, not exported late.
    assert exporter.abandoned
    assert exporter.exported == 0
    for flushing in [t for t in threading.enumerate() if t.name == "otel-shutdown"]:
        flushing.join(STUCK_SECONDS)
        assert not flushing.is_alive()  # and the abandoned flush ended too
