"""OpenAI's OpenAPI document as a check of the gateway's answers, by path, method and status.

``check_answer`` validates one HTTP answer against the response schema the document gives for
its path, method, status and content type: a JSON body as one instance, an event stream as one
instance per ``data:`` line (each Responses event against its own event schema, picked by its
``type``). Every error status is checked against ``ErrorResponse`` (OpenAI's ``{"error": ...}``,
what its API answers); a success the document lists without a body passes. A path the document
does not have (the gateway's own ``/health``, ``/metrics``, ``/admin``) is not checked and
``check_answer`` returns False::

    check_answer("POST", "/v1/responses", 200, "text/event-stream", body)   # or AssertionError

The document is vendored (openai-openapi/, see SOURCE.md there). It is OpenAPI 3.1, so JSON
Schema draft 2020-12, except for leftover OpenAPI 3.0 ``nullable: true`` keywords, read here as
what they meant: "or null".
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
from jsonschema import Draft202012Validator
from jsonschema.exceptions import best_match
from referencing import Registry, Resource
from referencing.jsonschema import DRAFT202012

DOCUMENT = Path(__file__).parent / "openai-openapi" / "openapi.json"
_BASE = "urn:openai-openapi"
_PREFIX = "/v1"


@functools.cache
def document() -> dict[str, Any]:
    loaded: dict[str, Any] = orjson.loads(DOCUMENT.read_bytes())
    result: dict[str, Any] = _or_null(loaded)
    return result


def _or_null(node: Any) -> Any:
    """The document with each ``nullable: true`` schema turned into ``anyOf: [it, null]``."""
    if isinstance(node, list):
        return [_or_null(item) for item in node]
    if not isinstance(node, dict):
        return node
    out = {key: _or_null(item) for key, item in node.items()}
    if out.pop("nullable", False) is True:
        return {"anyOf": [out, {"type": "null"}]}
    return out


@functools.cache
def _registry() -> Registry[Any]:
    resource = Resource.from_contents(document(), default_specification=DRAFT202012)
    return Registry().with_resource(_BASE, resource)


@functools.cache
def validator(ref: str) -> Draft202012Validator:
    """A validator for ``#/components/schemas/NAME`` (or any pointer into the document)."""
    return Draft202012Validator({"$ref": _BASE + ref}, registry=_registry())


@functools.cache
def _templates() -> tuple[tuple[re.Pattern[str], str], ...]:
    def pattern(template: str) -> re.Pattern[str]:
        return re.compile("^" + re.sub(r"\\\{[^}]+\\\}", "[^/]+", re.escape(template)) + "$")

    # Literal paths first, so /responses/compact is not read as /responses/{response_id}.
    paths = sorted(document()["paths"], key=lambda p: ("{" in p, p))
    return tuple((pattern(p), p) for p in paths)


def operation_of(method: str, path: str) -> dict[str, Any] | None:
    """The document's operation for a gateway path (``/v1/...``), or None."""
    path = path.partition("?")[0]
    if not path.startswith(_PREFIX + "/"):
        return None
    local = path[len(_PREFIX) :]
    for pattern, template in _templates():
        if pattern.match(local):
            found: dict[str, Any] | None = document()["paths"][template].get(method.lower())
            return found
    return None


@functools.cache
def _event_refs() -> dict[str, str]:
    """Each Responses stream event's ``type`` -> its schema (ResponseStreamEvent's variants)."""
    schemas = document()["components"]["schemas"]
    refs: dict[str, str] = {}
    for variant in schemas["ResponseStreamEvent"]["anyOf"]:
        ref = variant["$ref"]
        kind = schemas[ref.rsplit("/", 1)[1]]["properties"]["type"]
        for name in kind.get("enum", [kind.get("const")]):
            refs[name] = ref
    return refs


Tolerated = frozenset[tuple[str, ...]]

VLLM_NULLS: Tolerated = frozenset(
    {
        ("choices", "*", "message", "annotations"),
        ("choices", "*", "message", "function_call"),
        ("usage", "prompt_tokens_details"),
        ("usage", "completion_tokens_details"),
    }
)
"""The nulls vLLM 0.32's chat answers carry where OpenAI's document wants an object or an array
(seen in the e2e run, issue 36): the gateway relays vLLM's bodies untouched, so on the real
stack only these are tolerated (dropped before validating), named here rather than silent."""


def check_answer(
    method: str,
    path: str,
    status: int,
    content_type: str,
    body: bytes,
    tolerate: Tolerated = frozenset(),
) -> bool:
    """Validate one answer (see the module docstring); True when the document covers it.
    ``tolerate``: paths (``*`` for any array index) where a null is dropped first."""
    op = operation_of(method, path)
    if op is None:
        return False
    media = content_type.split(";")[0].strip().lower()
    answer = op["responses"].get(str(status))
    listed = {} if answer is None else answer.get("content", {})
    if status >= 400:
        # OpenAI answers every error as {"error": Error}; the document's few error bodies (a
        # 404 on DELETE /responses/{id}) name the inner Error alone.
        ref = "#/components/schemas/ErrorResponse"
    elif _raw_bytes(listed):
        return True  # a file's content: the document says only "a string", of any type
    elif media in listed:
        ref = listed[media]["schema"]["$ref"]
    elif answer is not None and not listed:
        return True  # a status the document lists with no schema (DELETE /responses/{id})
    else:
        raise AssertionError(
            f"{method} {path}: status {status} as {media or 'no content type'} is not an answer "
            f"OpenAI's document gives (it lists {sorted(op['responses'])})"
        )
    if media == "text/event-stream":
        for index, event in enumerate(sse_events(body)):
            event = _without_nulls(event, tolerate)
            _validate(_stream_ref(ref, event), event, f"{method} {path} event {index}")
    else:
        _validate(ref, _without_nulls(orjson.loads(body), tolerate), f"{method} {path} {status}")
    return True


def _without_nulls(instance: Any, tolerate: Tolerated) -> Any:
    for pattern in tolerate:
        _drop_null(instance, pattern)
    return instance


def _drop_null(node: Any, pattern: tuple[str, ...]) -> None:
    head, rest = pattern[0], pattern[1:]
    if head == "*":
        for item in node if isinstance(node, list) else ():
            _drop_null(item, rest)
    elif isinstance(node, dict) and head in node:
        if not rest:
            if node[head] is None:
                del node[head]
        else:
            _drop_null(node[head], rest)


def _stream_ref(ref: str, event: Any) -> str:
    if isinstance(event, dict) and "error" in event and "type" not in event:
        return "#/components/schemas/ErrorResponse"  # a chat stream's error, OpenAI's shape
    if ref.endswith("/ResponseStreamEvent") and isinstance(event, dict):
        kind = event.get("type")
        found = _event_refs().get(kind) if isinstance(kind, str) else None
        if found is None:
            raise AssertionError(f"a Responses stream event of unknown type {kind!r}: {event}")
        return found
    return ref


def sse_events(body: bytes) -> Iterator[Any]:
    """Each ``data:`` payload of an event stream, parsed (``[DONE]`` skipped)."""
    for block in body.replace(b"\r\n", b"\n").split(b"\n\n"):
        data = [line[5:].lstrip() for line in block.split(b"\n") if line.startswith(b"data:")]
        if data and data != [b"[DONE]"]:
            yield orjson.loads(b"\n".join(data))


def _raw_bytes(listed: dict[str, Any]) -> bool:
    """The answer is bytes the document does not describe (``GET /files/{id}/content``: one
    content type listed, its schema a bare string)."""
    schemas = [entry.get("schema", {}) for entry in listed.values()]
    return len(schemas) == 1 and schemas[0] == {"type": "string"}


def _validate(ref: str, instance: Any, where: str) -> None:
    error = best_match(validator(ref).iter_errors(instance))
    if error is not None:
        at = "/".join(str(p) for p in error.absolute_path) or "(root)"
        raise AssertionError(
            f"{where}: not {ref.rsplit('/', 1)[1]} by OpenAI's document at {at}: "
            f"{error.message[:400]}\n{orjson.dumps(instance).decode()[:2000]}"
        )
