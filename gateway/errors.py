"""One error tree for everything the gateway itself rejects or fails at.

Each error knows its HTTP status and its OpenAI ``type`` and ``code``, so one handler renders
every one of them in the OpenAI envelope ``{"error": {"message", "type", "param", "code"}}``
and the OpenAI SDKs map the status to their own exception classes::

    GatewayError
     +-- InvalidRequest (400 invalid_request_error)
     |    +-- InvalidJSON (400 invalid_json)
     |    +-- InvalidParameter (400, param named)
     +-- AuthenticationFailed (401 invalid_api_key)
     +-- PermissionDenied (403)
     +-- NotFound (404)
     |    +-- ModelNotFound (404 model_not_found)
     +-- MethodNotAllowed (405)
     +-- RequestTimeout (408 request_timeout)
     +-- Conflict (409 conflict)
     +-- BodyTooLarge (413)
     +-- UnsupportedMediaType (415)
     +-- HeaderFieldsTooLarge (431 request_header_fields_too_large)
     +-- RateLimited (429 rate_limit_exceeded)
     |    +-- TokensRateLimited (429, type tokens)
     |    +-- TooManyUploads (429 too_many_uploads)
     +-- UpstreamError (502 upstream_error)
     +-- NoHealthyUpstream (503 no_healthy_upstream)
     +-- Overloaded (503 server_overloaded)
     +-- UpstreamTimeout (504 timeout)
     +-- KeyStoreUnavailable (503 key_store_unavailable)
     +-- LimiterUnavailable (503 rate_limiter_unavailable)
"""

from __future__ import annotations

from collections.abc import Mapping

import orjson


class GatewayError(Exception):
    """Base of every error the gateway renders itself."""

    status: int = 500
    error_type: str = "server_error"
    default_code: str | None = None

    def __init__(
        self,
        message: str,
        *,
        param: str | None = None,
        code: str | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.param = param
        self.code = code if code is not None else self.default_code
        self.headers: Mapping[str, str] = headers or {}

    def body(self) -> bytes:
        return error_body(self.message, self.error_type, self.param, self.code)

    def sse_event(self) -> bytes:
        """The error as one SSE event, for a stream that has already started."""
        return b"data: " + self.body() + b"\n\n"


def error_body(message: str, error_type: str, param: str | None, code: str | None) -> bytes:
    return orjson.dumps(
        {"error": {"message": message, "type": error_type, "param": param, "code": code}}
    )


class InvalidRequest(GatewayError):
    status = 400
    error_type = "invalid_request_error"


class InvalidJSON(InvalidRequest):
    default_code = "invalid_json"


class InvalidParameter(InvalidRequest):
    default_code = "invalid_value"


class AuthenticationFailed(GatewayError):
    status = 401
    error_type = "invalid_request_error"
    default_code = "invalid_api_key"


class PermissionDenied(GatewayError):
    status = 403
    error_type = "invalid_request_error"
    default_code = "permission_denied"


class NotFound(GatewayError):
    status = 404
    error_type = "invalid_request_error"
    default_code = "not_found"


class ModelNotFound(NotFound):
    default_code = "model_not_found"

    def __init__(self, model: str) -> None:
        shown = model if len(model) <= 256 else model[:256] + "..."  # never echo a huge name
        super().__init__(
            f"The model `{shown}` does not exist or you do not have access to it.", param="model"
        )


class MethodNotAllowed(GatewayError):
    status = 405
    error_type = "invalid_request_error"
    default_code = "method_not_allowed"


class RequestTimeout(GatewayError):
    """The request (its headers or its body) did not arrive in time."""

    status = 408
    error_type = "invalid_request_error"
    default_code = "request_timeout"


class Conflict(GatewayError):
    """The thing to create exists already (admin API)."""

    status = 409
    error_type = "invalid_request_error"
    default_code = "conflict"


class BodyTooLarge(GatewayError):
    status = 413
    error_type = "invalid_request_error"
    default_code = "request_too_large"


class UnsupportedMediaType(GatewayError):
    status = 415
    error_type = "invalid_request_error"
    default_code = "unsupported_media_type"


class HeaderFieldsTooLarge(GatewayError):
    status = 431
    error_type = "invalid_request_error"
    default_code = "request_header_fields_too_large"


class RateLimited(GatewayError):
    status = 429
    error_type = "requests"
    default_code = "rate_limit_exceeded"


class TokensRateLimited(RateLimited):
    """A token limit (per minute or per day) refused the request; OpenAI types it ``tokens``."""

    error_type = "tokens"


class BudgetExhausted(RateLimited):
    """A hard budget in money has no room for the request's maximum cost. OpenAI's quota error:
    its SDKs retry a 429 unless ``x-should-retry: false`` says waiting cannot help."""

    error_type = "insufficient_quota"
    default_code = "insufficient_quota"


class TooManyUploads(RateLimited):
    """One client address has ``server.max_uploads_per_client`` bodies arriving already."""

    default_code = "too_many_uploads"


class Overloaded(GatewayError):
    """The gateway is at one of its caps (requests served, bodies arriving, connections)."""

    status = 503
    error_type = "server_error"
    default_code = "server_overloaded"


class LimiterUnavailable(GatewayError):
    """The shared rate-limit store cannot be reached and the policy is to fail closed."""

    status = 503
    error_type = "server_error"
    default_code = "rate_limiter_unavailable"


class UpstreamError(GatewayError):
    status = 502
    error_type = "server_error"
    default_code = "upstream_error"


class NoHealthyUpstream(GatewayError):
    status = 503
    error_type = "server_error"
    default_code = "no_healthy_upstream"


class QueueRefused(GatewayError):
    """Every pool that could serve the request is saturated and the flow-control queue could
    not hold it (full) or did not get it a place in time (``queue_timeout``)."""

    status = 503
    error_type = "server_error"
    default_code = "queue_full"


class Shed(GatewayError):
    """A request of a sheddable priority band, refused while the pools are saturated."""

    status = 429
    error_type = "requests"
    default_code = "shed"


class UpstreamTimeout(GatewayError):
    status = 504
    error_type = "server_error"
    default_code = "timeout"


class RoutingStateUnavailable(GatewayError):
    """The shared routing state (canary weights and rollbacks, in Redis) did not answer."""

    status = 503
    error_type = "server_error"
    default_code = "routing_state_unavailable"


class KeyStoreUnavailable(GatewayError):
    """A key had to be looked up and the key store did not answer: refused, never let through."""

    status = 503
    error_type = "server_error"
    default_code = "key_store_unavailable"
