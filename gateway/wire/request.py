"""Stage 1, parse: a size-limited body, JSON, and light validation of what the gateway needs.

The fields the gateway itself uses are checked (model, stream, max_tokens, messages, prompt,
input), and OpenAI's own sampling fields and message roles as OpenAI checks them (its ranges, its
error codes, ``param`` naming the field: ``check_openai_fields``); every other field (vLLM's
extensions: ``top_k``, ``min_p``, ``ignore_eos``...) passes through untouched to the upstream, so
new parameters work without a gateway release.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from enum import StrEnum
from typing import Any

import orjson

from gateway.asgi import Receive, Scope, header
from gateway.errors import BodyTooLarge, InvalidJSON, InvalidParameter, UnsupportedMediaType
from gateway.values import value
from gateway.wire.usage import client_wants_usage, usage_requested


class Operation(StrEnum):
    """What a request asks for; the value is the client's path below ``/v1``."""

    CHAT = "chat/completions"
    COMPLETION = "completions"
    EMBEDDING = "embeddings"
    RESPONSES = "responses"
    """The Responses API: translated to chat completions upstream
    (gateway/responses_translation/), or passed through to a pool that serves it natively."""

    @property
    def upstream(self) -> str:
        """The path below ``/v1`` the upstream gets (a translated operation's target)."""
        return Operation.CHAT.value if self is Operation.RESPONSES else self.value

    @property
    def counted_as(self) -> Operation:
        """How the prompt is counted: a translated request by what goes upstream."""
        return Operation.CHAT if self is Operation.RESPONSES else self


_REQUIRED_INPUT = {
    Operation.CHAT: "messages",
    # Responses: parsed after translation (gateway/responses_translation/request.py).
    Operation.RESPONSES: "messages",
    Operation.COMPLETION: "prompt",
    Operation.EMBEDDING: "input",
}


@value
class ParsedRequest:
    """A request as the gateway understands it; ``body`` is what goes upstream."""

    operation: Operation
    payload: dict[str, Any]
    body: bytes
    model: str
    stream: bool
    max_tokens: int | None
    """The output cap the upstream applies: ``max_completion_tokens`` when given (vLLM uses it
    over ``max_tokens``), else ``max_tokens``; None when neither is given."""
    choices: int = 1
    """Completions generated per prompt (``n``, or ``best_of`` when larger): each may use the
    whole output cap."""
    strip_usage: bool = False
    """The gateway asked the upstream for the stream's usage chunk on the client's behalf: the
    relay strips it again."""
    source: Mapping[str, Any] | None = None
    """A translated request (Responses): the client's own body, which a pool that serves the
    operation natively gets, and which the translated answer echoes. ``payload`` and ``body``
    are then the translation (what is counted, routed and sent to other pools)."""

    def with_model(self, upstream_model: str | None) -> bytes:
        """The body for an upstream that knows the model by another name (or this body)."""
        if upstream_model is None or upstream_model == self.model:
            return self.body
        return orjson.dumps({**self.payload, "model": upstream_model})

    def native_body(self, upstream_model: str | None) -> bytes:
        """The client's own body (a translated request), for a pool that serves it natively."""
        if self.source is None:
            return self.with_model(upstream_model)
        model = self.model if upstream_model is None else upstream_model
        return orjson.dumps({**self.source, "model": model})


async def read_body(scope: Scope, receive: Receive, limit: int) -> bytes:
    """The whole request body, refusing a wrong content type or more than ``limit`` bytes."""
    content_type = header(scope, b"content-type")
    if content_type is not None and not content_type.lower().startswith(b"application/json"):
        raise UnsupportedMediaType(
            f"Content-Type must be application/json, got {content_type.decode(errors='replace')!r}."
        )
    declared = header(scope, b"content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise BodyTooLarge(f"The request body is larger than the limit of {limit} bytes.")
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            raise InvalidJSON("The client closed the connection before sending the whole body.")
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > limit:
            raise BodyTooLarge(f"The request body is larger than the limit of {limit} bytes.")
        chunks.append(chunk)
        if not message.get("more_body", False):
            return chunks[0] if len(chunks) == 1 else b"".join(chunks)


@value
class BodyShape:
    """Bounds on a body's shape, checked before anything costs more than a scan of its bytes."""

    max_containers: int = 200_000
    """JSON objects plus arrays in the whole body: checked on the raw bytes, before parsing (a
    4 MiB body of ``[{},{},...]`` would otherwise take about 150 MB to parse)."""
    max_items: int = 10_000
    """Entries in ``messages``, or in a list ``prompt`` / ``input``."""
    max_model_chars: int = 256


DEFAULT_SHAPE = BodyShape()


def parse_request(
    operation: Operation, body: bytes, max_tokens_limit: int, shape: BodyShape = DEFAULT_SHAPE
) -> ParsedRequest:
    return parse_payload(operation, load_object(body, shape), body, max_tokens_limit, shape)


def load_object(body: bytes, shape: BodyShape = DEFAULT_SHAPE) -> dict[str, Any]:
    """The body as a JSON object, or the 400 that says why not."""
    # Counting brackets over-counts those inside strings: a bound, never a wrong refusal of a
    # body within it. bytes.count runs in C, about 1 ms for 4 MiB.
    if body.count(b"{") + body.count(b"[") > shape.max_containers:
        raise InvalidParameter(
            f"The request body has more than {shape.max_containers} JSON objects and arrays.",
            code="body_too_complex",
        )
    try:
        payload = orjson.loads(body)
    except orjson.JSONDecodeError as err:
        raise InvalidJSON(f"The request body is not valid JSON: {err}.") from None
    if not isinstance(payload, dict):
        raise InvalidJSON("The request body must be a JSON object.")
    return payload


def parse_payload(
    operation: Operation,
    payload: dict[str, Any],
    body: bytes,
    max_tokens_limit: int,
    shape: BodyShape = DEFAULT_SHAPE,
) -> ParsedRequest:
    """Check what the gateway needs of a decoded body (``body`` its bytes, as forwarded)."""
    model = payload.get("model")
    if not isinstance(model, str) or not model:
        raise InvalidParameter("`model` is required and must be a non-empty string.", param="model")
    if len(model) > shape.max_model_chars:
        raise InvalidParameter(
            f"`model` is longer than {shape.max_model_chars} characters.", param="model"
        )
    required = _REQUIRED_INPUT[operation]
    if required not in payload:
        raise InvalidParameter(
            f"`{required}` is required.", param=required, code="missing_required_parameter"
        )
    items = payload[required]
    if isinstance(items, list) and len(items) > shape.max_items:
        raise InvalidParameter(
            f"`{required}` has {len(items)} entries, more than this gateway allows "
            f"({shape.max_items}).",
            param=required,
        )
    if operation.counted_as is Operation.CHAT and (
        not isinstance(payload[required], list) or not payload[required]
    ):
        raise InvalidParameter("`messages` must be a non-empty array.", param="messages")
    check_openai_fields(payload)
    if operation is Operation.CHAT:
        check_roles(payload[required])
    stream = payload.get("stream", False)
    if not isinstance(stream, bool):
        raise InvalidParameter("`stream` must be a boolean.", param="stream")
    if operation is Operation.EMBEDDING and stream:
        raise InvalidParameter("Embeddings cannot be streamed.", param="stream")
    request = ParsedRequest(
        operation=operation,
        payload=payload,
        body=body,
        model=model,
        stream=stream,
        max_tokens=_max_tokens(payload, max_tokens_limit),
        choices=_choices(payload),
    )
    return _asking_for_usage(request)


_MAX_CHOICES = 128

# OpenAI's ranges for its sampling fields (its OpenAPI document), the same on every endpoint.
_RANGES: dict[str, tuple[float, float, bool]] = {
    # name: (minimum, maximum, integer)
    "temperature": (0, 2, False),
    "top_p": (0, 1, False),
    "presence_penalty": (-2, 2, False),
    "frequency_penalty": (-2, 2, False),
    "top_logprobs": (0, 20, True),
}
CHAT_ROLES = ("system", "developer", "user", "assistant", "tool", "function")


def check_openai_fields(payload: Mapping[str, Any]) -> None:
    """OpenAI's sampling fields in OpenAI's ranges, refused as OpenAI refuses them (null is
    "not given")."""
    for name, (low, high, integer) in _RANGES.items():
        check_range(payload, name, low, high, integer=integer)


def check_range(
    payload: Mapping[str, Any], name: str, low: float, high: float | None, *, integer: bool
) -> None:
    given = payload.get(name)
    if given is None:
        return
    kind = "integer" if integer else "decimal"
    number = integral(given) if integer else given
    if number is None or isinstance(number, bool) or not isinstance(number, int | float):
        expected = "an integer" if integer else "a number"
        raise InvalidParameter(
            f"Invalid type for '{name}': expected {expected}.", param=name, code="invalid_type"
        )
    if number < low:
        raise InvalidParameter(
            f"Invalid '{name}': {kind} below minimum value. Expected a value >= {low:g}, "
            f"but got {number:g} instead.",
            param=name,
            code=f"{kind}_below_min_value",
        )
    if high is not None and number > high:
        raise InvalidParameter(
            f"Invalid '{name}': {kind} above maximum value. Expected a value <= {high:g}, "
            f"but got {number:g} instead.",
            param=name,
            code=f"{kind}_above_max_value",
        )


def check_roles(messages: list[Any]) -> None:
    """Each chat message an object with one of OpenAI's roles."""
    for index, message in enumerate(messages):
        role = message.get("role") if isinstance(message, dict) else None
        if not isinstance(role, str) or role not in CHAT_ROLES:
            shown = str(role)[:64]
            raise InvalidParameter(
                f"Invalid value: '{shown}'. Supported values are: "
                + ", ".join(f"'{r}'" for r in CHAT_ROLES)
                + ".",
                param=f"messages[{index}].role",
                code="invalid_value",
            )


def _choices(payload: dict[str, Any]) -> int:
    found = 1
    for name in ("n", "best_of"):
        value = _bounded_count(payload, name, _MAX_CHOICES)
        if value is not None:
            found = max(found, value)
    return found


def _bounded_count(payload: dict[str, Any], name: str, limit: int) -> int | None:
    """``payload[name]`` as a positive integer of at most ``limit`` (None when absent)."""
    value = payload.get(name)
    if value is None:
        return None
    value = integral(value)
    if value is None or value < 1:
        raise InvalidParameter(f"`{name}` must be a positive integer.", param=name)
    if value > limit:
        raise InvalidParameter(
            f"`{name}` is {value}, more than this gateway allows ({limit}).", param=name
        )
    return value


def _asking_for_usage(request: ParsedRequest) -> ParsedRequest:
    """A stream whose client did not ask for usage: ask for it (the relay strips it again).

    Re-serialising here, at parse time, means a body orjson reads but cannot write back (nested
    deeper than it writes) is refused with a 400 before anything is reserved.
    """
    if not request.stream or request.operation is Operation.EMBEDDING:
        return request
    if client_wants_usage(request.payload):
        return request
    payload = usage_requested(request.payload)
    try:
        body = orjson.dumps(payload)
    except TypeError as err:  # orjson.JSONEncodeError is one, and so is its recursion limit
        raise InvalidJSON(f"The request body cannot be forwarded: {err}.") from None
    return dataclasses.replace(request, payload=payload, body=body, strip_usage=True)


def _max_tokens(payload: dict[str, Any], limit: int) -> int | None:
    found: int | None = None
    for name in ("max_tokens", "max_completion_tokens"):  # the latter wins, as in vLLM
        value = _bounded_count(payload, name, limit)
        if value is not None:
            found = value
    return found


def integral(value: object) -> int | None:
    """An integer, or a float with no fraction (JSON Schema counts ``1.0`` as an integer, and so
    does vLLM's validation); None for anything else."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return None
