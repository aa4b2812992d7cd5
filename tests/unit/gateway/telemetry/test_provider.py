"""build_tracing: config first, OTEL_* for what the config leaves open, off means no-op."""

from __future__ import annotations

import pytest
from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter as GrpcExporter
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter as HttpExporter
from opentelemetry.sdk.trace import Tracer as SdkTracer
from opentelemetry.trace import NoOpTracer

from gateway.config import parse_config
from gateway.telemetry import TracingConfig, build_tracing
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
