"""Ray Serve's tracing exporter hook: OTLP span export configured only by ``OTEL_*`` variables.

Ray Serve imports the function named by ``RAY_SERVE_TRACING_EXPORTER_IMPORT_PATH`` in its proxy,
controller and replica processes and adds the span processors it returns::

    RAY_SERVE_TRACING_EXPORTER_IMPORT_PATH=serve_app.tracing:span_processors_from_env
    RAY_SERVE_TRACING_SAMPLING_RATIO=1
    OTEL_EXPORTER_OTLP_ENDPOINT=http://otel-collector.observability:4318
    OTEL_EXPORTER_OTLP_PROTOCOL=http/protobuf        # or grpc (then port 4317)

The module stands alone on purpose: it imports only the standard library and OpenTelemetry (never
the rest of serve_app, never the gateway), so the RayServices can mount this one file into an image
that does not carry serve_app (the AWS Ray LLM DLC; k8s/base/ray/tracing.yaml) and import it under
the same path. The gateway has its own copy of the set-up (gateway/telemetry/export.py): the two
packages share no code.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import TYPE_CHECKING, Literal

if TYPE_CHECKING:
    from opentelemetry.sdk.trace import SpanProcessor
    from opentelemetry.sdk.trace.export import SpanExporter

HOOK_PATH = "serve_app.tracing:span_processors_from_env"
"""The value of ``RAY_SERVE_TRACING_EXPORTER_IMPORT_PATH`` that loads this hook."""

Protocol = Literal["http/protobuf", "grpc"]


def otlp_protocol(env: Mapping[str, str]) -> Protocol:
    """The traces-specific ``OTEL_EXPORTER_OTLP_TRACES_PROTOCOL``, else the general one."""
    value = env.get("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL") or env.get(
        "OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf"
    )
    if value not in ("http/protobuf", "grpc"):
        raise ValueError(f"unsupported OTLP protocol {value!r} (http/protobuf or grpc)")
    return "grpc" if value == "grpc" else "http/protobuf"


def otlp_exporter(protocol: Protocol) -> SpanExporter:
    """An OTLP exporter that reads its endpoint, headers and timeout from ``OTEL_EXPORTER_*``.

    Imported here, not at module level, so that a missing exporter package names itself: Ray's
    images carry the OpenTelemetry SDK but not always the OTLP exporters.
    """
    try:
        if protocol == "grpc":
            from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import (
                OTLPSpanExporter as GrpcExporter,
            )

            return GrpcExporter()
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import (
            OTLPSpanExporter as HttpExporter,
        )

        return HttpExporter()
    except ImportError as err:
        package = "opentelemetry-exporter-otlp-proto-" + ("grpc" if protocol == "grpc" else "http")
        raise ImportError(
            f"Ray Serve tracing ({HOOK_PATH}) needs {package} in the Ray image: {err}"
        ) from err


def span_processors_from_env() -> list[SpanProcessor]:
    """A batching OTLP exporter configured only by ``OTEL_*`` (Ray Serve's exporter hook)."""
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    return [BatchSpanProcessor(otlp_exporter(otlp_protocol(os.environ)))]
