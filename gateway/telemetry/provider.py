"""Build the gateway's tracer from config and environment: a real SDK tracer, or the no-op one.

The provider belongs to one app (it is not installed as OpenTelemetry's global provider), so two
apps in one process, as in tests, never share spans.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping

from opentelemetry.propagators.textmap import TextMapPropagator
from opentelemetry.sdk.resources import SERVICE_NAME, Resource
from opentelemetry.sdk.trace import SpanLimits, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter
from opentelemetry.trace import NoOpTracer, Tracer
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from gateway.telemetry.config import TracingConfig
from gateway.telemetry.export import resolve_protocol, span_exporter
from gateway.telemetry.sampling import EdgeSampler
from gateway.values import value

DEFAULT_SERVICE_NAME = "pd-gateway"
INSTRUMENTATION_NAME = "pd-gateway"


@value
class Tracing:
    """The tracer the request pipeline uses, the propagator for ``traceparent``, and shutdown."""

    tracer: Tracer
    propagator: TextMapPropagator
    config: TracingConfig
    provider: TracerProvider | None = None
    exporter: SpanExporter | None = None

    def shutdown(self) -> None:
        """Flush spans still queued for export and stop the exporter (no-op when disabled).

        Bounded by ``config.shutdown_timeout``: with the collector unreachable the exporter would
        retry each batch for its whole export timeout, holding up the process's exit. Past the
        bound the exporter is shut down, which ends its retries, and the rest is dropped.
        """
        if self.provider is None:
            return
        flushing = threading.Thread(target=self.provider.shutdown, name="otel-shutdown")
        flushing.start()
        flushing.join(self.config.shutdown_timeout)
        if flushing.is_alive() and self.exporter is not None:
            self.exporter.shutdown()
            flushing.join(self.config.shutdown_timeout)


def tracing_enabled(config: TracingConfig, env: Mapping[str, str]) -> bool:
    if env.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return False
    if env.get("OTEL_TRACES_EXPORTER", "").strip().lower() == "none":
        return False
    return config.enabled


def build_tracing(config: TracingConfig, env: Mapping[str, str]) -> Tracing:
    """OpenTelemetry's no-op tracer when tracing is off, else an SDK tracer exporting over OTLP."""
    propagator = TraceContextTextMapPropagator()
    if not tracing_enabled(config, env):
        return Tracing(NoOpTracer(), propagator, config)
    provider = TracerProvider(
        resource=_resource(config, env),
        sampler=EdgeSampler(sampling_ratio(config, env)),
        span_limits=_limits(config),
    )
    exporter = span_exporter(resolve_protocol(config.protocol, env), config.endpoint)
    provider.add_span_processor(BatchSpanProcessor(exporter))
    tracer = provider.get_tracer(INSTRUMENTATION_NAME)
    return Tracing(tracer, propagator, config, provider, exporter)


def _resource(config: TracingConfig, env: Mapping[str, str]) -> Resource:
    # Resource.create merges OTEL_RESOURCE_ATTRIBUTES and OTEL_SERVICE_NAME itself; only name the
    # service when neither the config nor the environment did.
    name = config.service_name or env.get("OTEL_SERVICE_NAME") or DEFAULT_SERVICE_NAME
    return Resource.create({SERVICE_NAME: name})


def sampling_ratio(config: TracingConfig, env: Mapping[str, str]) -> float:
    """The config's ratio, else ``OTEL_TRACES_SAMPLER_ARG``, else 1.0 (the SDK's default)."""
    if config.sampling_ratio is not None:
        return config.sampling_ratio
    try:
        return min(1.0, max(0.0, float(env.get("OTEL_TRACES_SAMPLER_ARG", "1.0"))))
    except ValueError:
        return 1.0


def _limits(config: TracingConfig) -> SpanLimits:
    n = config.max_attributes
    return SpanLimits(
        max_attributes=n,
        max_events=n,
        max_links=n,
        max_event_attributes=n,
        max_link_attributes=n,
        max_attribute_length=config.max_attribute_length,
    )
