"""Tracing for the gateway: OpenTelemetry spans per request, per upstream attempt and per phase.

- ``config.TracingConfig``: the ``tracing:`` config section (``OTEL_*`` variables fill the gaps).
- ``provider.build_tracing``: an SDK tracer exporting over OTLP, or the no-op tracer when off.
- ``server.ServerSpanMiddleware``: the server span; continues an incoming ``traceparent``.
- ``attempt.UpstreamAttempt``: the client span of each upstream attempt, ``prefill`` and
  ``decode`` children, ``traceparent`` for the upstream, and the per-phase metrics.
- ``export.span_exporter``: OTLP export (Ray Serve's own hook is ``serve_app.tracing``).
"""

from gateway.telemetry.config import TracingConfig
from gateway.telemetry.provider import Tracing, build_tracing

__all__ = ["Tracing", "TracingConfig", "build_tracing"]
