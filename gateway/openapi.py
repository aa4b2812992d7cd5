"""The OpenAPI 3.1 description of the gateway's own API (served at ``/openapi.json``).

The document is generated from the app's route table: its paths are exactly the routes served
(those with ``include_in_schema``), each described by an operation here, and a route without one
is an error (:class:`UndescribedRoute`), so a new route cannot be left out. Bodies the gateway
parses with a pydantic model (the admin API's) are described by that model's own JSON schema::

    openapi_document(app.routes, bodies={("POST", "/admin/tenants"): TenantSpec})

Request schemas of the OpenAI routes name only the fields the gateway checks; every other OpenAI
field is allowed and passed through to the upstream unchanged.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

from pydantic import BaseModel
from starlette.routing import BaseRoute, Mount, Route

from gateway import __version__


class UndescribedRoute(Exception):
    """A route is served that the document does not describe."""


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

# Server-sent events: in OpenAPI 3.1 the schema of text/event-stream describes each event (3.2's
# itemSchema, read as 3.1 tools read it). Each event's ``data`` holds one JSON chunk, the last is
# ``[DONE]``, and a failure after the start is an ``error`` object in the last ``data``.
_EVENT_STREAM = {
    "schema": {
        "type": "object",
        "required": ["data"],
        "properties": {
            "data": {"type": "string", "description": "a chunk's JSON, or [DONE]"},
            "event": {"type": "string"},
        },
    },
    "example": {"data": '{"object":"chat.completion.chunk","choices":[]}', "event": "message"},
}

# The default server.max_tokens_limit: a deployment may lower it (then larger values are 400).
_MAX_TOKENS = {"type": "integer", "minimum": 1, "maximum": 1_000_000}
# OpenAI's ranges for its sampling fields, as the gateway checks them (gateway/wire/request.py's
# _RANGES, a layer above this one): a value outside them is a 400, so the document says so.
_SAMPLING: dict[str, dict[str, Any]] = {
    "temperature": {"type": "number", "minimum": 0, "maximum": 2},
    "top_p": {"type": "number", "minimum": 0, "maximum": 1},
    "presence_penalty": {"type": "number", "minimum": -2, "maximum": 2},
    "frequency_penalty": {"type": "number", "minimum": -2, "maximum": 2},
    "top_logprobs": {"type": "integer", "minimum": 0, "maximum": 20},
    # Choices a request may ask for (gateway/wire/request.py's _MAX_CHOICES).
    "n": {"type": "integer", "minimum": 1, "maximum": 128},
    "best_of": {"type": "integer", "minimum": 1, "maximum": 128},
}
_CHAT_MESSAGE = {
    "type": "object",
    "required": ["role"],
    "properties": {
        "role": {"enum": ["system", "developer", "user", "assistant", "tool", "function"]}
    },
}


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
            **_SAMPLING,
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


# The Responses input items the gateway translates (gateway/responses_translation/request.py),
# as it checks them: a message (its type may be left out), a function call, a function call's
# output; only user messages may carry images (by URL).
_STRING = {"type": "string"}
_NONEMPTY = {"type": "string", "minLength": 1}
_TEXT_PART = {
    "anyOf": [
        {
            "type": "object",
            "required": ["type", "text"],
            "properties": {
                "type": {"enum": ["input_text", "output_text", "text"]},
                "text": _STRING,
            },
        },
        {
            "type": "object",
            "required": ["type", "refusal"],
            "properties": {"type": {"const": "refusal"}, "refusal": _STRING},
        },
    ]
}
_IMAGE_PART = {
    "type": "object",
    "required": ["type", "image_url"],
    "properties": {"type": {"const": "input_image"}, "image_url": _STRING},
}


def _message_item(roles: list[str], part: dict[str, Any]) -> dict[str, Any]:
    return {
        "type": "object",
        "required": ["role", "content"],
        "properties": {
            "type": {"const": "message"},
            "role": {"enum": roles},
            "content": {"anyOf": [_STRING, {"type": "array", "items": part}]},
        },
    }


_INPUT_ITEMS = [
    _message_item(["user"], {"anyOf": [_TEXT_PART, _IMAGE_PART]}),
    _message_item(["system", "developer", "assistant"], _TEXT_PART),
    {
        "type": "object",
        "required": ["type", "call_id", "name"],
        "properties": {
            "type": {"const": "function_call"},
            "call_id": _NONEMPTY,
            "name": _NONEMPTY,
            "arguments": _STRING,
        },
    },
    {
        "type": "object",
        "required": ["type", "call_id", "output"],
        "properties": {
            "type": {"const": "function_call_output"},
            "call_id": _NONEMPTY,
            "output": {"anyOf": [_STRING, {"type": "array", "items": _TEXT_PART}]},
        },
    },
]


def _responses_request() -> dict[str, Any]:
    item = {"anyOf": _INPUT_ITEMS}
    return {
        "type": "object",
        "required": ["model", "input"],
        "properties": {
            "model": {"type": "string", "minLength": 1},
            "input": {
                "oneOf": [
                    {"type": "string", "minLength": 1},
                    {"type": "array", "minItems": 1, "items": item},
                ]
            },
            "instructions": {"type": "string"},
            "stream": {"type": "boolean"},
            # OpenAI's minimum for max_output_tokens is 16 (gateway/responses_translation).
            "max_output_tokens": {**_MAX_TOKENS, "minimum": 16},
            "temperature": _SAMPLING["temperature"],
            "top_p": _SAMPLING["top_p"],
            # Passed through to the chat request it becomes, and checked there.
            "n": _SAMPLING["n"],
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


def openapi_document(
    routes: Iterable[BaseRoute] | None = None,
    bodies: Mapping[tuple[str, str], type[BaseModel]] | None = None,
) -> dict[str, Any]:
    """The document for ``routes`` (default: every operation described here), with the body of
    each ``(method, path)`` in ``bodies`` described by its model."""
    described = _operations()
    schemas = _schemas()
    if routes is None:
        paths = described
    else:
        paths = {}
        for method, path in served(routes):
            operation = described.get(path, {}).get(method.lower())
            if operation is None:
                raise UndescribedRoute(f"{method} {path} is served but not described")
            paths.setdefault(path, {})[method.lower()] = operation
    for (method, path), model in (bodies or {}).items():
        operation = paths.get(path, {}).get(method.lower())
        if operation is not None:
            operation["requestBody"] = _model_body(model, schemas)
    return {
        "openapi": "3.1.0",
        "info": {"title": "pd-gateway", "version": __version__},
        "paths": paths,
        "security": [{"bearer": []}, {"apiKeyHeader": []}],
        "components": {
            "schemas": schemas,
            "securitySchemes": {
                "bearer": {"type": "http", "scheme": "bearer"},
                "apiKeyHeader": {"type": "apiKey", "in": "header", "name": "api-key"},
            },
        },
    }


_CONVERTOR = re.compile(r"{([^}:]+):[^}]+}")


def served(routes: Iterable[BaseRoute], prefix: str = "") -> Iterator[tuple[str, str]]:
    """``(method, path)`` of every route in the document's terms (``{model:path}`` is
    ``{model}``; HEAD, which Starlette adds to GET, is left out)."""
    for route in routes:
        if isinstance(route, Mount):
            yield from served(route.routes, prefix + route.path)
        elif isinstance(route, Route) and route.include_in_schema:
            path = _CONVERTOR.sub(r"{\1}", prefix + route.path)
            for method in sorted(route.methods or ()):
                if method != "HEAD":
                    yield method, path


def _model_body(model: type[BaseModel], schemas: dict[str, Any]) -> dict[str, Any]:
    """A request body described by its pydantic model, its nested models as components."""
    schema = model.model_json_schema(ref_template="#/components/schemas/{model}")
    schemas.update(schema.pop("$defs", {}))
    schemas[model.__name__] = schema
    content = {"application/json": {"schema": _ref(model.__name__)}}
    return {"required": True, "content": content}


def _operations() -> dict[str, dict[str, Any]]:
    """Every operation the gateway may serve, by path and method."""
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
        **_batch_paths(_errors_of(("400", "401", "404", "413", "415", "429", "500", "503"))),
        **_budget_paths(_errors_of(("400", "401", "403", "404", "500", "503"))),
        **_price_paths(_errors_of(("400", "401", "403", "404", "413", "415", "500", "503"))),
        "/metrics": {
            "get": {
                "summary": "Prometheus metrics (an admin key or auth.metrics_token; tenant series "
                "only with a credential)",
                "responses": {
                    "200": {
                        "description": "The Prometheus text format",
                        "content": {"text/plain": {"schema": {"type": "string"}}},
                    },
                    **unauthorized,
                    "403": {
                        "description": _ERROR_STATUSES["403"],
                        "content": {"application/json": {"schema": _ref("ErrorResponse")}},
                    },
                },
            }
        },
        "/openapi.json": {"get": {**_get("This document", {"type": "object"})["get"], **public}},
    }


_WEIGHT = {
    "type": "object",
    "required": ["weight"],
    "properties": {"weight": {"type": "number", "minimum": 0}},
}


def _groups(*names: str) -> dict[str, Any]:
    """``group_by``: a comma-separated list of these (gateway/accounting/usage_api.py)."""
    one = "|".join(names)
    return {"type": "string", "pattern": f"^(({one})(,({one}))*)?$"}


_SECONDS = {"type": "number", "minimum": 0, "exclusiveMaximum": 1e11}  # UNIX seconds
_USAGE_QUERY: dict[str, Any] = {"start_time": _SECONDS, "end_time": _SECONDS}
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
    query: Mapping[str, dict[str, Any]] | None = None,
    path: tuple[str, ...] = (),
    body: bool | dict[str, Any] = False,
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
                {"name": n, "in": "query", "required": False, "schema": schema}
                for n, schema in (query or {}).items()
            ),
        ],
        "responses": {
            "200": {"description": summary, "content": {"application/json": {"schema": result}}},
            **errors,
        },
    }
    if body:  # the admin API's models replace these (openapi_document's ``bodies``)
        schema = _OBJECT if body is True else body
        op["requestBody"] = {"required": True, "content": {"application/json": {"schema": schema}}}
    return op


def _csv(op: dict[str, Any]) -> dict[str, Any]:
    """``op`` answering CSV text instead of JSON (the usage exports)."""
    ok = op["responses"]["200"]
    ok["content"] = {"text/csv": {"schema": {"type": "string"}}}
    return op


def _management_paths(errors: dict[str, Any]) -> dict[str, Any]:
    """Usage, keys and routing: what the web console reads (it has no other API), and the
    stored responses. Their fields are described in gateway/accounting/usage_api.py,
    gateway/admin/*.py and gateway/response_store/api.py."""
    t, k, r = ("tenant",), ("key",), ("response_id",)
    return {
        "/v1/responses/{response_id}": {
            "get": _op("A stored response of the caller's tenant (404: absent, expired or "
                       "another tenant's)", errors, path=r,
                       query={"include": {"type": "array", "items": {"type": "string"}}},
                       result=_ref("Response")),
            "delete": _op("Delete a stored response: {id, object, deleted}", errors, path=r)},
        "/v1/responses/{response_id}/input_items": {"get": _op(
            "The conversation a stored response was made from (earlier turns included), as "
            "items with ids; limit 1-100 (20), order desc (default) or asc, after/before an "
            "item id; first_id, last_id, has_more", errors, path=r,
            query={"limit": {"type": "integer", "minimum": 1, "maximum": 100},
                   "order": {"enum": ["asc", "desc"]}, "after": {"type": "string"},
                   "before": {"type": "string"},
                   "include": {"type": "array", "items": {"type": "string"}}},
            result=_LIST)},
        "/admin/tenants/{tenant}/responses": {"delete": _op(
            "Delete every stored response of a tenant: {tenant_id, deleted}", errors, path=t)},
        "/v1/usage": {"get": _op(
            "The caller's usage (scope=key) or its tenant's (scope=tenant), by some of day, "
            "key_id, model; has_more when cut", errors, query={
                **_USAGE_QUERY, "group_by": _groups("day", "key_id", "model"),
                "scope": {"enum": ["key", "tenant"]}},
            result=_LIST)},
        "/v1/usage/export": {"get": _csv(_op(
            "/v1/usage's groups as CSV (cost_micros sums to the ledger's)", errors, query={
                **_USAGE_QUERY, "group_by": _groups("day", "key_id", "model"),
                "scope": {"enum": ["key", "tenant"]}}))},
        "/v1/keys": {"get": _op("The caller's tenant's keys, never secrets", errors,
                                result=_LIST)},
        "/admin/usage": {"get": _op(
            "Any tenant's or key's usage (admin keys)", errors,
            query={
                **_USAGE_QUERY, "group_by": _groups("day", "tenant_id", "key_id", "model"),
                "tenant_id": _STRING, "key_id": _STRING, "model": _STRING},
            result=_LIST)},
        "/admin/usage/export": {"get": _csv(_op(
            "/admin/usage's groups as CSV (cost_micros sums to the ledger's)", errors,
            query={
                **_USAGE_QUERY, "group_by": _groups("day", "tenant_id", "key_id", "model"),
                "tenant_id": _STRING, "key_id": _STRING, "model": _STRING}))},
        "/admin/tenants": {"get": _op("Tenants", errors, result=_LIST),
                           "post": _op("Create a tenant", errors, body=True)},
        "/admin/tenants/{tenant}": {
            "get": _op("One tenant", errors, path=t),
            "patch": _op("Replace a tenant's limits: {limits}", errors, path=t, body=True)},
        "/admin/tenants/{tenant}/disable": {"post": _op(
            "Disable a tenant: its keys are refused on every replica within auth.cache_seconds",
            errors, path=t)},
        "/admin/tenants/{tenant}/enable": {"post": _op("Enable a tenant again", errors, path=t)},
        "/admin/tenants/{tenant}/keys": {
            "get": _op("A tenant's keys, never secrets", errors, path=t, result=_LIST),
            "post": _op("Create a key; its secret (key) is in this answer only", errors,
                        path=t, body=True)},
        "/admin/keys/{key}": {
            "get": _op("One key", errors, path=k),
            "patch": _op("Change a key's limits or expiry: {limits?, expires_at?, "
                         "clear_expiry?}", errors, path=k, body=True)},
        "/admin/keys": {"get": _op("Every tenant's keys, never secrets", errors, result=_LIST)},
        "/admin/keys/{key}/revoke": {"post": _op("Revoke a key", errors, path=k)},
        "/admin/keys/{key}/rotate": {"post": _op(
            "A new secret for the key; the old one works for grace_seconds more; the new secret "
            "(key) is in this answer only", errors, path=k, body=True)},
        "/admin/routing": {"get": _op(
            "Models (variants, weights, recent error rate and p95 TTFT, canary, last "
            "rollback) and pools (replicas, health, breakers)", errors)},
        "/admin/routing/reload": {"post": _op(
            "Reload the config file the gateway was started from (pools, models, routing); a "
            "config that does not parse is refused (400 invalid_config) and the old one serves",
            errors)},
        "/admin/routing/models/{model}/variants/{variant}": {"put": _op(
            "Set a variant's weight: {weight}", errors, path=("model", "variant"), body=_WEIGHT)},
    }  # fmt: skip


_MICROS = {"type": ["integer", "null"]}
_BUDGET_VIEW = {
    "type": "object",
    "required": ["object", "scope", "id", "budget", "currency", "spent_micros",
                 "remaining_micros", "resets_at"],
    "properties": {
        "object": {"const": "budget"}, "scope": {"enum": ["tenant", "key"]}, "id": _STRING,
        "budget": {"type": ["object", "null"]}, "currency": {"type": ["string", "null"]},
        "amount_micros": _MICROS, "spent_micros": _MICROS, "committed_micros": _MICROS,
        "remaining_micros": _MICROS, "spent": _STRING, "remaining": _STRING,
        "resets_at": {"type": ["string", "null"], "description": "UTC ISO time; null: never"},
    },
}  # fmt: skip


def _budget_paths(errors: dict[str, Any]) -> dict[str, Any]:
    """A tenant's or key's budget in money (gateway/admin/budgets.py): PUT's body is
    ``limits.budgets.Budget``'s schema (openapi_document's ``bodies``)."""
    paths: dict[str, Any] = {}
    for path, name, who in (
        ("/admin/tenants/{tenant}/budget", "tenant", "a tenant"),
        ("/admin/keys/{key}/budget", "key", "a key (never its tenant's)"),
    ):
        p = (name,)
        paths[path] = {
            "get": _op(f"The budget of {who}: spent, committed (spent plus what requests in "
                       "flight hold reserved), remaining and when it resets; budget null when "
                       "it has none", errors, path=p, result=_BUDGET_VIEW),
            "put": _op(f"Set or replace the budget of {who} (what was spent this period stays):"
                       " {amount, currency?, period?, mode?, alert_thresholds?}", errors,
                       path=p, body=True, result=_BUDGET_VIEW),
            "delete": _op(f"Lift the budget of {who} (its other limits stay)", errors, path=p,
                          result=_BUDGET_VIEW),
        }  # fmt: skip
    return paths


_BATCH_ENDPOINTS = ["/v1/chat/completions", "/v1/completions", "/v1/embeddings", "/v1/responses"]
_FILE = {
    "type": "object",
    "required": ["id", "object", "bytes", "created_at", "filename", "purpose", "status"],
    "properties": {"object": {"const": "file"}, "id": _STRING, "bytes": {"type": "integer"}},
}
_BATCH = {
    "type": "object",
    "required": ["id", "object", "endpoint", "input_file_id", "completion_window", "status",
                 "created_at"],
    "properties": {"object": {"const": "batch"}, "id": _STRING,
                   "status": {"enum": ["validating", "failed", "in_progress", "finalizing",
                                       "completed", "expired", "cancelling", "cancelled"]}},
}  # fmt: skip
_UPLOAD = {
    "type": "object",
    "required": ["file", "purpose"],
    "properties": {"file": {"type": "string", "format": "binary"}, "purpose": {"enum": ["batch"]}},
}
_CREATE_BATCH = {
    "type": "object",
    "required": ["input_file_id", "endpoint", "completion_window"],
    "properties": {
        "input_file_id": {"type": "string", "minLength": 1, "maxLength": 128},
        "endpoint": {"enum": _BATCH_ENDPOINTS},
        "completion_window": {"enum": ["24h"]},
        "metadata": {
            "type": "object",
            "maxProperties": 16,
            "propertyNames": {"maxLength": 64},
            "additionalProperties": {"type": "string", "maxLength": 512},
        },
    },
}


def _batch_paths(errors: dict[str, Any]) -> dict[str, Any]:
    """The Files and Batch APIs (gateway/batches/api.py), OpenAI's objects; the caller's tenant's
    files and batches only (another tenant's id is a 404)."""
    f, b = ("file_id",), ("batch_id",)
    upload = _op(
        "Upload a batch input file (JSONL, each line checked; purpose batch)", errors, result=_FILE
    )
    upload["requestBody"] = {
        "required": True,
        "content": {"multipart/form-data": {"schema": _UPLOAD}},
    }
    content = _op("The file's bytes (JSONL)", errors, path=f)
    content["responses"]["200"]["content"] = {"application/jsonl": {"schema": _STRING}}
    return {
        "/v1/files": {
            "get": _op("The tenant's files, newest first (order asc/desc, after, limit "
                       "1-10000, purpose)", errors, result=_LIST,
                       query={"limit": {"type": "integer", "minimum": 1, "maximum": 10000},
                              "order": {"enum": ["asc", "desc"]}, "after": _STRING,
                              "purpose": _STRING}),
            "post": upload},
        "/v1/files/{file_id}": {
            "get": _op("One file", errors, path=f, result=_FILE),
            "delete": _op("Delete a file: {id, object, deleted}", errors, path=f)},
        "/v1/files/{file_id}/content": {"get": content},
        "/v1/batches": {
            "get": _op("The tenant's batches, newest first (after, limit 1-100)", errors,
                       result=_LIST, query={"limit": {"type": "integer", "minimum": 1,
                                                      "maximum": 100}, "after": _STRING}),
            "post": _op("Create a batch from an uploaded file; its lines run on idle capacity",
                        errors, body=_CREATE_BATCH, result=_BATCH)},
        "/v1/batches/{batch_id}": {"get": _op("One batch", errors, path=b, result=_BATCH)},
        "/v1/batches/{batch_id}/cancel": {"post": _op(
            "Cancel a batch: cancelling, then cancelled with the lines done so far", errors,
            path=b, result=_BATCH)},
    }  # fmt: skip


# A price as the admin API takes it (gateway/accounting/prices.py's PriceSpec): decimal strings
# per million tokens, never JSON numbers (a float has lost its exact value before it is read).
_DECIMAL = {"type": "string", "pattern": r"^\d{1,6}(\.\d{1,6})?$"}
_PRICE_BODY = {
    "type": "object",
    "required": ["currency", "input", "output"],
    "properties": {
        "currency": {"type": "string", "pattern": "^[A-Z]{3}$"},
        "input": _DECIMAL,
        "cached_input": {"anyOf": [_DECIMAL, {"type": "null"}]},
        "output": _DECIMAL,
        "batch_discount": {"type": "string", "pattern": r"^0(\.\d{1,6})?$"},
    },
    "additionalProperties": False,
}
_PRICE_ENTRY = {
    "type": "object",
    "required": ["model", "variant", "source", "currency", "version", "in_force"],
    "properties": {
        "model": _STRING,
        "variant": {"type": ["string", "null"]},
        "source": {"enum": ["config", "admin"]},
        "currency": {"type": ["string", "null"]},
        "version": _STRING,
        "input": _STRING,
        "cached_input": _STRING,
        "output": _STRING,
        "batch_discount": _STRING,
        "set_at": {"type": ["number", "null"]},
        "set_by": {"type": ["string", "null"]},
        "configured": {"type": "boolean"},
        "in_force": {"type": "boolean"},
    },
}
_PRICE_LIST = {
    "type": "object",
    "required": ["object", "data"],
    "properties": {
        "object": {"const": "list"},
        "currency": {"type": ["string", "null"]},
        "data": {"type": "array", "items": _PRICE_ENTRY},
    },
}
_PRICE_CLEARED = {
    "type": "object",
    "required": ["model", "variant", "deleted", "price"],
    "properties": {
        "model": _STRING,
        "variant": {"type": ["string", "null"]},
        "deleted": {"const": True},
        "price": {"anyOf": [_PRICE_ENTRY, {"type": "null"}]},
    },
}


def _price_paths(errors: dict[str, Any]) -> dict[str, Any]:
    """Prices set through the admin API (gateway/admin/prices.py), laid over the config's."""
    m, mv = ("model",), ("model", "variant")
    return {
        "/admin/prices": {"get": _op(
            "Every price in force (source config or admin, its version), and API prices not "
            "in force", errors, result=_PRICE_LIST)},
        "/admin/prices/{model}": {
            "get": _op("The model's prices (its variants' too)", errors, path=m,
                       result=_PRICE_LIST),
            "put": _op("Set the model's price: stored, a new version, on every replica within "
                       "accounting.prices_sync_seconds", errors, path=m, body=_PRICE_BODY,
                       result=_PRICE_ENTRY),
            "delete": _op("Remove the API's price: the config's, if any, applies again",
                          errors, path=m, result=_PRICE_CLEARED)},
        "/admin/prices/{model}/variants/{variant}": {
            "get": _op("The variant's own price", errors, path=mv, result=_PRICE_LIST),
            "put": _op("Set the variant's own price", errors, path=mv, body=_PRICE_BODY,
                       result=_PRICE_ENTRY),
            "delete": _op("Remove the variant's API price", errors, path=mv,
                          result=_PRICE_CLEARED)},
    }  # fmt: skip


def _schemas() -> dict[str, Any]:
    text_or_list = {"oneOf": [{"type": "string"}, {"type": "array"}]}
    return {
        "ChatRequest": _request_schema(
            "messages", {"type": "array", "minItems": 1, "items": _CHAT_MESSAGE}
        ),
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
