"""The tracing section of the gateway's config (``tracing:`` in the YAML file).

Values set here win; values left unset fall back to the standard OpenTelemetry environment
variables, and to the SDK's defaults after that::

    tracing:
      enabled: true
      protocol: grpc                      # else OTEL_EXPORTER_OTLP[_TRACES]_PROTOCOL
      endpoint: http://collector:4317     # else OTEL_EXPORTER_OTLP[_TRACES]_ENDPOINT
      sampling_ratio: 0.05                # else OTEL_TRACES_SAMPLER_ARG, else 1.0
      trusted_parent_networks: [10.0.0.0/8]  # whose traceparent sampled flag is followed

``OTEL_SDK_DISABLED=true`` or ``OTEL_TRACES_EXPORTER=none`` turn tracing off whatever the file says.
Defined here, not in ``gateway.config``, which imports it: one section, one owner.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, IPvAnyNetwork

from configkit import StrictModel

Protocol = Literal["http/protobuf", "grpc"]


class TracingConfig(StrictModel):
    enabled: bool = False
    protocol: Protocol | None = None
    endpoint: str | None = None
    """The collector's base URL (``/v1/traces`` is appended for http/protobuf), as in
    ``OTEL_EXPORTER_OTLP_ENDPOINT``."""
    sampling_ratio: float | None = Field(None, ge=0.0, le=1.0)
    """Head sampling of new traces, and of traces from untrusted callers (else
    ``OTEL_TRACES_SAMPLER_ARG``, else 1.0)."""
    trusted_parent_networks: tuple[IPvAnyNetwork, ...] = ()
    """Callers (by client address) whose ``traceparent`` sampled flag is followed. Anyone else's
    trace id is kept but the gateway's own ratio decides (gateway/telemetry/sampling.py)."""
    max_attributes: int = Field(64, ge=1)
    """Span attribute limits: attributes (and events, links) per span ..."""
    max_attribute_length: int = Field(1024, ge=16)
    """... and characters per string attribute value, so no client value grows a span."""
    service_name: str | None = None
    """Else ``OTEL_SERVICE_NAME``, else ``pd-gateway``."""
    provider_name: str = "vllm"
    """``gen_ai.provider.name`` on upstream spans: what serves the model behind Ray Serve."""
    capture_content: bool = False
    """Record prompt messages on upstream spans. Off by default: prompts may hold personal data."""
    max_content_chars: int = Field(4096, gt=0)
    shutdown_timeout: float = Field(5.0, gt=0)
    """Seconds the gateway waits at exit for queued spans to reach the collector."""
