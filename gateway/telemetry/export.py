"""OTLP span export over HTTP/protobuf or gRPC, configured from the config or ``OTEL_*``.

Ray Serve's exporter hook lives with the Ray image's code, not here:
``serve_app.tracing:span_processors_from_env`` (the gateway and serve_app share no code).
"""

from __future__ import annotations

from collections.abc import Mapping

from opentelemetry.sdk.trace.export import SpanExporter

from gateway.extras import require
from gateway.telemetry.config import Protocol

HTTP_TRACES_PATH = "/v1/traces"


def resolve_protocol(configured: Protocol | None, env: Mapping[str, str]) -> Protocol:
    """The config's choice, else the traces-specific variable, else the general one."""
    if configured is not None:
        return configured
    value = env.get("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL") or env.get(
        "OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf"
    )
    if value not in ("http/protobuf", "grpc"):
        raise ValueError(f"unsupported OTLP protocol {value!r} (http/protobuf or grpc)")
    return "grpc" if value == "grpc" else "http/protobuf"


def span_exporter(protocol: Protocol, endpoint: str | None) -> SpanExporter:
    """An OTLP exporter; ``endpoint=None`` lets the exporter read ``OTEL_EXPORTER_OTLP_*``.

    Imported here, at build time, so a gateway with tracing off never loads grpc.
    """
    if protocol == "grpc":
        require("otlp-grpc", "tracing.protocol: grpc")
        from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import (
            OTLPSpanExporter as GrpcExporter,
        )

        return GrpcExporter(endpoint=endpoint, insecure=_plaintext(endpoint))
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import (
        OTLPSpanExporter as HttpExporter,
    )

    url = None if endpoint is None else endpoint.rstrip("/") + HTTP_TRACES_PATH
    return HttpExporter(endpoint=url)


def _plaintext(endpoint: str | None) -> bool | None:
    """gRPC needs to be told that an ``http://`` endpoint has no TLS; None lets the env decide."""
    return None if endpoint is None else endpoint.startswith("http://")
