"""A client's traceparent sampled flag is followed only from trusted networks; spans are bounded."""

from __future__ import annotations

from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from gateway.telemetry import Tracing, TracingConfig
from gateway.telemetry.provider import _limits
from gateway.telemetry.sampling import EdgeSampler
from gateway.telemetry.server import ServerSpanMiddleware
from tests.unit.gateway.telemetry.test_server import CHAT, PARENT_ID, TRACE_ID, answering, run
from tests.unit.gateway.telemetry.test_server import scope_for as _scope_for

SAMPLED = f"00-{TRACE_ID}-{PARENT_ID}-01".encode()
NOT_SAMPLED = f"00-{TRACE_ID}-{PARENT_ID}-00".encode()


def traced(ratio: float, **config: object) -> tuple[ServerSpanMiddleware, InMemorySpanExporter]:
    cfg = TracingConfig.model_validate({"enabled": True, **config})
    exporter = InMemorySpanExporter()
    provider = TracerProvider(sampler=EdgeSampler(ratio), span_limits=_limits(cfg))
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracing = Tracing(provider.get_tracer("t"), TraceContextTextMapPropagator(), cfg, provider)
    return ServerSpanMiddleware(answering(200, []), tracing=tracing, traced_paths=[CHAT]), exporter


def scope_from(client: str, header: bytes) -> dict[str, object]:
    scope = _scope_for(CHAT, [(b"traceparent", header)])
    scope["client"] = (client, 40000)
    return scope


async def test_an_untrusted_callers_sampled_flag_does_not_force_a_trace() -> None:
    middleware, exporter = traced(0.0, trusted_parent_networks=["10.0.0.0/8"])
    for _ in range(20):
        await run(middleware, scope_from("203.0.113.7", SAMPLED))
    assert exporter.get_finished_spans() == ()


async def test_a_trusted_callers_flag_is_followed_both_ways() -> None:
    middleware, exporter = traced(0.0, trusted_parent_networks=["10.0.0.0/8"])
    await run(middleware, scope_from("10.1.2.3", SAMPLED))
    (span,) = exporter.get_finished_spans()
    assert f"{span.context.trace_id:032x}" == TRACE_ID
    middleware, exporter = traced(1.0, trusted_parent_networks=["10.0.0.0/8"])
    await run(middleware, scope_from("10.1.2.3", NOT_SAMPLED))
    assert exporter.get_finished_spans() == ()


async def test_untrusted_callers_sampled_by_the_gateway_keep_their_trace_id() -> None:
    middleware, exporter = traced(1.0)  # no trusted networks: the default
    await run(middleware, scope_from("10.1.2.3", NOT_SAMPLED))
    (span,) = exporter.get_finished_spans()
    assert f"{span.context.trace_id:032x}" == TRACE_ID


def test_span_attributes_are_limited() -> None:
    cfg = TracingConfig(enabled=True, max_attributes=4, max_attribute_length=32)
    exporter = InMemorySpanExporter()
    provider = TracerProvider(span_limits=_limits(cfg))
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    with provider.get_tracer("t").start_as_current_span("s") as span:
        span.set_attributes({f"a{i}": "x" * 1000 for i in range(10)})
    (finished,) = exporter.get_finished_spans()
    assert finished.attributes is not None
    assert len(finished.attributes) == 4
    assert all(len(str(v)) == 32 for v in finished.attributes.values())
