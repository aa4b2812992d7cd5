"""Span attribute names: OpenTelemetry's GenAI and HTTP conventions, then the gateway's own.

Never a secret, never prompt text (unless ``tracing.capture_content`` is on): tenant and key are
named by their ids, the key by its public id only.
"""

from __future__ import annotations

# GenAI semantic conventions (gen_ai.*), on the client span of each upstream attempt.
OPERATION_NAME = "gen_ai.operation.name"
PROVIDER_NAME = "gen_ai.provider.name"
REQUEST_MODEL = "gen_ai.request.model"
REQUEST_MAX_TOKENS = "gen_ai.request.max_tokens"
REQUEST_STREAM = "gen_ai.request.stream"
RESPONSE_MODEL = "gen_ai.response.model"
RESPONSE_ID = "gen_ai.response.id"
RESPONSE_FINISH_REASONS = "gen_ai.response.finish_reasons"
USAGE_INPUT_TOKENS = "gen_ai.usage.input_tokens"
USAGE_OUTPUT_TOKENS = "gen_ai.usage.output_tokens"
INPUT_MESSAGES = "gen_ai.input.messages"

# General and HTTP conventions.
SERVER_ADDRESS = "server.address"
SERVER_PORT = "server.port"
ERROR_TYPE = "error.type"
HTTP_METHOD = "http.request.method"
HTTP_ROUTE = "http.route"
HTTP_STATUS = "http.response.status_code"
URL_PATH = "url.path"

# The gateway's own facts about a request.
REQUEST_ID = "gateway.request_id"
CORRELATION_ID = "gateway.correlation_id"
"""The client's own x-request-id, when it sent a well-formed one."""
MODEL = "gateway.model"
POOL = "gateway.pool"
REPLICA = "gateway.replica"
VARIANT = "gateway.variant"
ROUTING_REASON = "gateway.routing.reason"
PREDICTED_TTFT = "gateway.routing.predicted_ttft_ms"
"""The serving pool's predicted time to first token (issue 38's latency models)."""
QUEUE_WAIT = "gateway.flow.wait_seconds"
PRIORITY_BAND = "gateway.flow.band"
TENANT = "gateway.tenant"
KEY_PUBLIC_ID = "gateway.key.public_id"
CLIENT_DISCONNECTED = "gateway.client_disconnected"

# On the phase spans.
PHASE_MEASURED = "gateway.phase.measured"
"""How the phase times were obtained: ``stream`` (from SSE arrival times at the gateway) or
``whole_response`` (non-streaming: one span, prefill and decode not separable)."""
CONTENT_CHUNKS = "gateway.decode.content_chunks"
TOKENS_PER_SECOND = "gateway.decode.tokens_per_second"
TOKENS_PER_SECOND_LOWER_BOUND = "gateway.output_tokens_per_second_lower_bound"
USAGE_SOURCE = "gateway.usage.source"
"""``upstream`` (the usage the engine reported) or ``content_chunks`` (counted at the gateway)."""
