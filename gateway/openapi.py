"""The OpenAPI 3.1 description of the gateway's own API (served at ``/openapi.json``).

Request schemas name only the fields the gateway checks; every other OpenAI field is allowed and
passed through to the upstream unchanged.
"""

from __future__ import annotations

from typing import Any

from gateway import __version__

_ERROR_STATUSES = {
    "400": "Invalid JSON or parameters",
    "401": "Missing or invalid API key (invalid_api_key)",
    "404": "Unknown model",
    "413": "Body over the configured limit",
    "415": "Content-Type is not application/json",
    "502": "The upstream failed",
    "503": "No healthy upstream",
    "504": "The upstream timed out",
}

_MAX_TOKENS = {"type": "integer", "minimum": 1}


def _ref(name: str) -> dict[str, str]:
    return {"$ref": f"#/components/schemas/{name}"}


def _request_schema(required_input: str, input_schema: dict[str, Any]) -> dict[str, Any]:
    return {
        "type": "object",
        "required": ["model", required_input],
        "properties": {
            "model": {"type": "string", "minLength": 1},
            required_input: input_schema,
            "stream": {"type": "boolean"},
            "max_tokens": _MAX_TOKENS,
        },
        "additionalProperties": True,
    }


def _proxy_operation(summary: str, schema: str, streams: bool) -> dict[str, Any]:
    ok: dict[str, Any] = {"application/json": {"schema": {"type": "object"}}}
    if streams:
        ok["text/event-stream"] = {"schema": {"type": "string"}}
    responses: dict[str, Any] = {"200": {"description": "The upstream's answer", "content": ok}}
    for status, text in _ERROR_STATUSES.items():
        responses[status] = {
            "description": text,
            "content": {"application/json": {"schema": _ref("ErrorResponse")}},
        }
    return {
        "post": {
            "summary": summary,
            "requestBody": {
                "required": True,
                "content": {"application/json": {"schema": _ref(schema)}},
            },
            "responses": responses,
        }
    }


def _get(
    summary: str, schema: dict[str, Any], extra: dict[str, Any] | None = None
) -> dict[str, Any]:
    responses: dict[str, Any] = {
        "200": {"description": summary, "content": {"application/json": {"schema": schema}}},
        **(extra or {}),
    }
    return {"get": {"summary": summary, "responses": responses}}


def openapi_document() -> dict[str, Any]:
    unauthorized = {
        "401": {
            "description": _ERROR_STATUSES["401"],
            "content": {"application/json": {"schema": _ref("ErrorResponse")}},
        }
    }
    not_found = {
        **unauthorized,
        "404": {
            "description": "Unknown model",
            "content": {"application/json": {"schema": _ref("ErrorResponse")}},
        },
    }
    public: dict[str, Any] = {"security": []}  # gateway/auth/middleware.py: ALWAYS_PUBLIC
    model_param = [{"name": "model", "in": "path", "required": True, "schema": {"type": "string"}}]
    retrieve = _get("One model", _ref("Model"), not_found)
    retrieve["get"]["parameters"] = model_param
    return {
        "openapi": "3.1.0",
        "info": {"title": "pd-gateway", "version": __version__},
        "paths": {
            "/v1/chat/completions": _proxy_operation("Chat completion", "ChatRequest", True),
            "/v1/completions": _proxy_operation("Text completion", "CompletionRequest", True),
            "/v1/embeddings": _proxy_operation("Embeddings", "EmbeddingRequest", False),
            "/v1/models": _get("Models the key may use", _ref("ModelList"), unauthorized),
            "/v1/models/{model}": retrieve,
            "/healthz": {"get": {**_get("Liveness", {"type": "object"})["get"], **public}},
            "/readyz": {"get": {**_get("Readiness", {"type": "object"})["get"], **public}},
            **_management_paths(unauthorized),
        },
        "security": [{"bearer": []}, {"apiKeyHeader": []}],
        "components": {
            "schemas": _schemas(),
            "securitySchemes": {
                "bearer": {"type": "http", "scheme": "bearer"},
                "apiKeyHeader": {"type": "apiKey", "in": "header", "name": "api-key"},
            },
        },
    }


_USAGE_QUERY = ("start_time", "end_time", "group_by")
_OBJECT = {"type": "object"}
_LIST = {
    "type": "object",
    "required": ["object", "data"],
    "properties": {"object": {"const": "list"}, "data": {"type": "array", "items": _OBJECT}},
}


def _op(
    summary: str,
    errors: dict[str, Any],
    *,
    query: tuple[str, ...] = (),
    path: tuple[str, ...] = (),
    body: bool = False,
    result: dict[str, Any] = _OBJECT,
) -> dict[str, Any]:
    """An operation of the management API (keys required; errors in the OpenAI envelope)."""
    op: dict[str, Any] = {
        "summary": summary,
        "parameters": [
            *(
                {"name": n, "in": "path", "required": True, "schema": {"type": "string"}}
                for n in path
            ),
            *(
                {"name": n, "in": "query", "required": False, "schema": {"type": "string"}}
                for n in query
            ),
        ],
        "responses": {
            "200": {"description": summary, "content": {"application/json": {"schema": result}}},
            **errors,
        },
    }
    if body:
        op["requestBody"] = {"required": True, "content": {"application/json": {"schema": _OBJECT}}}
    return op


def _management_paths(errors: dict[str, Any]) -> dict[str, Any]:
    """Usage, keys and routing: what the web console reads (it has no other API). Their
    fields are described in gateway/accounting/usage_api.py and gateway/admin/*.py."""
    t, k = ("tenant",), ("key",)
    return {
        "/v1/usage": {"get": _op(
            "The caller's usage (scope=key) or its tenant's (scope=tenant), by some of day, "
            "key_id, model; has_more when cut", errors, query=(*_USAGE_QUERY, "scope"),
            result=_LIST)},
        "/v1/keys": {"get": _op("The caller's tenant's keys, never secrets", errors,
                                result=_LIST)},
        "/admin/usage": {"get": _op(
            "Any tenant's or key's usage (admin keys)", errors,
            query=(*_USAGE_QUERY, "tenant_id", "key_id", "model"), result=_LIST)},
        "/admin/tenants": {"get": _op("Tenants", errors, result=_LIST),
                           "post": _op("Create a tenant", errors, body=True)},
        "/admin/tenants/{tenant}": {
            "get": _op("One tenant", errors, path=t),
            "patch": _op("Replace a tenant's limits: {limits}", errors, path=t, body=True)},
        "/admin/tenants/{tenant}/keys": {
            "get": _op("A tenant's keys, never secrets", errors, path=t, result=_LIST),
            "post": _op("Create a key; its secret (key) is in this answer only", errors,
                        path=t, body=True)},
        "/admin/keys/{key}": {
            "get": _op("One key", errors, path=k),
            "patch": _op("Change a key's limits or expiry: {limits?, expires_at?, "
                         "clear_expiry?}", errors, path=k, body=True)},
        "/admin/keys/{key}/revoke": {"post": _op("Revoke a key", errors, path=k)},
        "/admin/routing": {"get": _op(
            "Models (variants, weights, recent error rate and p95 TTFT, canary, last "
            "rollback) and pools (replicas, health, breakers)", errors)},
        "/admin/routing/models/{model}/variants/{variant}": {"put": _op(
            "Set a variant's weight: {weight}", errors, path=("model", "variant"), body=True)},
    }  # fmt: skip


def _schemas() -> dict[str, Any]:
    text_or_list = {"oneOf": [{"type": "string"}, {"type": "array"}]}
    return {
        "ChatRequest": _request_schema("messages", {"type": "array", "minItems": 1}),
        "CompletionRequest": _request_schema("prompt", text_or_list),
        "EmbeddingRequest": _request_schema("input", text_or_list),
        "Model": {
            "type": "object",
            "required": ["id", "object", "created", "owned_by"],
            "properties": {
                "id": {"type": "string"},
                "object": {"const": "model"},
                "created": {"type": "integer"},
                "owned_by": {"type": "string"},
            },
        },
        "ModelList": {
            "type": "object",
            "required": ["object", "data"],
            "properties": {
                "object": {"const": "list"},
                "data": {"type": "array", "items": _ref("Model")},
            },
        },
        "ErrorResponse": {
            "type": "object",
            "required": ["error"],
            "properties": {
                "error": {
                    "type": "object",
                    "required": ["message", "type", "param", "code"],
                    "properties": {
                        "message": {"type": "string"},
                        "type": {"type": "string"},
                        "param": {"type": ["string", "null"]},
                        "code": {"type": ["string", "null"]},
                    },
                }
            },
        },
    }
