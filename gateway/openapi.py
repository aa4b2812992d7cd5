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
    "403": "The key may not use this",
    "404": "Unknown model",
    "408": "The request was not received in time (server.header_timeout / body_timeout)",
    "413": "Body over the configured limit",
    "415": "Content-Type is not application/json",
    "422": "The upstream refused the parameters",
    "429": "A rate limit was reached (retry-after says when to retry)",
    "431": "Request headers too large or too many",
    "500": "The gateway failed unexpectedly",
    "502": "The upstream failed",
    "503": "No healthy upstream, or the gateway is overloaded",
    "504": "The upstream timed out",
}

# Server-sent events: OpenAPI 3.1 has no item schema for a stream, so the body is a string of
# the text/event-stream media type; each ``data:`` line holds one JSON chunk, the last is
# ``data: [DONE]``, and a failure after the start is an ``error`` object in a ``data:`` line.
_EVENT_STREAM = {
    "schema": {
        "type": "string",
        "contentMediaType": "text/event-stream",
        "description": "data: {chunk JSON}\\n\\n ... data: [DONE]\\n\\n",
    },
    "example": 'data: {"object":"chat.completion.chunk","choices":[]}\n\ndata: [DONE]\n\n',
}

# The default server.max_tokens_limit: a deployment may lower it (then larger values are 400).
_MAX_TOKENS = {"type": "integer", "minimum": 1, "maximum": 1_000_000}


def _ref(name: str) -> dict[str, str]:
    return {"$ref": f"#/components/schemas/{name}"}


def _request_schema(
    required_input: str, input_schema: dict[str, Any], streams: bool = True
) -> dict[str, Any]:
    return {
        "type": "object",
        "required": ["model", required_input],
        "properties": {
            "model": {"type": "string", "minLength": 1},
            required_input: input_schema,
            "stream": {"type": "boolean"} if streams else {"const": False},
            "max_tokens": _MAX_TOKENS,
        },
        "additionalProperties": True,
    }


def _proxy_operation(
    summary: str,
    schema: str,
    streams: bool,
    answer: dict[str, Any] | None = None,
    description: str | None = None,
) -> dict[str, Any]:
    ok: dict[str, Any] = {"application/json": {"schema": answer or {"type": "object"}}}
    if streams:
        ok["text/event-stream"] = _EVENT_STREAM
    responses: dict[str, Any] = {"200": {"description": "The upstream's answer", "content": ok}}
    for status, text in _ERROR_STATUSES.items():
        responses[status] = {
            "description": text,
            "content": {"application/json": {"schema": _ref("ErrorResponse")}},
        }
    return {
        "post": {
            "summary": summary,
            **({} if description is None else {"description": description}),
            "requestBody": {
                "required": True,
                "content": {"application/json": {"schema": _ref(schema)}},
            },
            "responses": responses,
        }
    }


_RESPONSES_DESCRIPTION = (
    "Translated to /v1/chat/completions upstream (a pool configured with `responses: native` "
    "gets the body unchanged). With `stream: true` the answer is the Responses event stream "
    "(response.created ... response.completed, or response.failed after an `error` event when "
    "the upstream fails mid-stream), each event with an increasing `sequence_number`. With "
    "`store` true or omitted the gateway keeps the response for its key's tenant "
    "(`responses.ttl_seconds`, 30 days by default); `previous_response_id` continues a stored "
    "one (404 when absent, expired or another tenant's), counted and billed as the whole "
    "conversation. `conversation`, `item_reference` and built-in tools are refused with a 400 "
    "(only tools of type `function` are served), as is a conversation larger than "
    "`responses.max_bytes` when it is to be stored."
)


def _responses_request() -> dict[str, Any]:
    item = {"type": "object", "description": "message, function_call or function_call_output"}
    return {
        "type": "object",
        "required": ["model", "input"],
        "properties": {
            "model": {"type": "string", "minLength": 1},
            "input": {"oneOf": [{"type": "string"}, {"type": "array", "items": item}]},
            "instructions": {"type": "string"},
            "stream": {"type": "boolean"},
            "max_output_tokens": _MAX_TOKENS,
            "temperature": {"type": "number"},
            "top_p": {"type": "number"},
            "tools": {
                "type": "array",
                "maxItems": 128,
                "items": {
                    "type": "object",
                    "required": ["type", "name"],
                    "properties": {
                        "type": {"const": "function"},
                        "name": {"type": "string", "minLength": 1},
                    },
                },
            },
            "tool_choice": {
                "oneOf": [
                    {"enum": ["auto", "none", "required"]},
                    {
                        "type": "object",
                        "required": ["type", "name"],
                        "properties": {
                            "type": {"const": "function"},
                            "name": {"type": "string", "minLength": 1},
                        },
                    },
                ]
            },
            "parallel_tool_calls": {"type": "boolean"},
            "text": {"type": "object", "description": "format: text, json_object or json_schema"},
            "metadata": {
                "type": "object",
                "maxProperties": 16,
                "additionalProperties": {"type": "string", "maxLength": 512},
            },
            "user": {"type": "string"},
            "store": {"type": "boolean"},
            "previous_response_id": {"type": "string"},
        },
        "additionalProperties": True,
    }


def _response() -> dict[str, Any]:
    usage = {
        "type": "object",
        "required": ["input_tokens", "output_tokens", "total_tokens"],
        "properties": {
            name: {"type": "integer"} for name in ("input_tokens", "output_tokens", "total_tokens")
        },
    }
    return {
        "type": "object",
        "required": ["id", "object", "created_at", "status", "model", "output"],
        "properties": {
            "id": {"type": "string"},
            "object": {"const": "response"},
            "created_at": {"type": "integer"},
            "status": {"enum": ["completed", "incomplete", "failed", "in_progress", "cancelled"]},
            "model": {"type": "string"},
            "output": {
                "type": "array",
                "items": {
                    "type": "object",
                    "properties": {"type": {"enum": ["message", "function_call"]}},
                },
            },
            "usage": {"anyOf": [usage, {"type": "null"}]},  # null: failed or cancelled
        },
    }


def _errors_of(codes: tuple[str, ...]) -> dict[str, Any]:
    """These statuses, each with the OpenAI error envelope."""
    return {
        code: {
            "description": _ERROR_STATUSES.get(code, "Conflict: it exists already"),
            "content": {"application/json": {"schema": _ref("ErrorResponse")}},
        }
        for code in codes
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
            "/v1/responses": _proxy_operation(
                "Create a response (the OpenAI Responses API)",
                "ResponsesRequest",
                True,
                answer=_ref("Response"),
                description=_RESPONSES_DESCRIPTION,
            ),
            "/v1/models": _get("Models the key may use", _ref("ModelList"), unauthorized),
            "/v1/models/{model}": retrieve,
            "/healthz": {"get": {**_get("Liveness", {"type": "object"})["get"], **public}},
            "/readyz": {"get": {**_get("Readiness", {"type": "object"})["get"], **public}},
            **_management_paths(
                _errors_of(("400", "401", "403", "404", "409", "413", "415", "429", "500", "503"))
            ),
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
    """Usage, keys and routing: what the web console reads (it has no other API), and the
    stored responses. Their fields are described in gateway/accounting/usage_api.py,
    gateway/admin/*.py and gateway/stored/api.py."""
    t, k, r = ("tenant",), ("key",), ("response_id",)
    return {
        "/v1/responses/{response_id}": {
            "get": _op("A stored response of the caller's tenant (404: absent, expired or "
                       "another tenant's)", errors, path=r, query=("include",),
                       result=_ref("Response")),
            "delete": _op("Delete a stored response: {id, object, deleted}", errors, path=r)},
        "/v1/responses/{response_id}/input_items": {"get": _op(
            "The conversation a stored response was made from (earlier turns included), as "
            "items with ids; limit 1-100 (20), order desc (default) or asc, after/before an "
            "item id; first_id, last_id, has_more", errors, path=r,
            query=("limit", "order", "after", "before", "include"), result=_LIST)},
        "/admin/tenants/{tenant}/responses": {"delete": _op(
            "Delete every stored response of a tenant: {tenant_id, deleted}", errors, path=t)},
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
        "EmbeddingRequest": _request_schema("input", text_or_list, streams=False),
        "ResponsesRequest": _responses_request(),
        "Response": _response(),
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
                        # Upstream errors are normalised to this envelope: a string code.
                        "code": {"type": ["string", "null"]},
                    },
                }
            },
        },
    }
