"""Stage 1, parse: a size-limited body, JSON, and light validation of what the gateway needs.

Only the fields the gateway itself uses are checked (model, stream, max_tokens, messages, prompt,
input); every other field passes through untouched to the upstream, so new OpenAI parameters work
without a gateway release.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Any

import orjson

from gateway.asgi import Receive, Scope, header
from gateway.errors import BodyTooLarge, InvalidJSON, InvalidParameter, UnsupportedMediaType


class Operation(StrEnum):
    """What a request asks for; the value is the upstream path below ``/v1``."""

    CHAT = "chat/completions"
    COMPLETION = "completions"
    EMBEDDING = "embeddings"


_REQUIRED_INPUT = {
    Operation.CHAT: "messages",
    Operation.COMPLETION: "prompt",
    Operation.EMBEDDING: "input",
}


@dataclass(slots=True)
class ParsedRequest:
    operation: Operation
    payload: dict[str, Any]
    body: bytes
    model: str
    stream: bool
    max_tokens: int | None


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


def parse_request(operation: Operation, body: bytes, max_tokens_limit: int) -> ParsedRequest:
    try:
        payload = orjson.loads(body)
    except orjson.JSONDecodeError as err:
        raise InvalidJSON(f"The request body is not valid JSON: {err}.") from None
    if not isinstance(payload, dict):
        raise InvalidJSON("The request body must be a JSON object.")
    model = payload.get("model")
    if not isinstance(model, str) or not model:
        raise InvalidParameter("`model` is required and must be a non-empty string.", param="model")
    required = _REQUIRED_INPUT[operation]
    if required not in payload:
        raise InvalidParameter(
            f"`{required}` is required.", param=required, code="missing_required_parameter"
        )
    if operation is Operation.CHAT and (
        not isinstance(payload[required], list) or not payload[required]
    ):
        raise InvalidParameter("`messages` must be a non-empty array.", param="messages")
    stream = payload.get("stream", False)
    if not isinstance(stream, bool):
        raise InvalidParameter("`stream` must be a boolean.", param="stream")
    if operation is Operation.EMBEDDING and stream:
        raise InvalidParameter("Embeddings cannot be streamed.", param="stream")
    return ParsedRequest(
        operation=operation,
        payload=payload,
        body=body,
        model=model,
        stream=stream,
        max_tokens=_max_tokens(payload, max_tokens_limit),
    )


def _max_tokens(payload: dict[str, Any], limit: int) -> int | None:
    found: int | None = None
    for name in ("max_tokens", "max_completion_tokens"):
        value = payload.get(name)
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise InvalidParameter(f"`{name}` must be a positive integer.", param=name)
        if value > limit:
            raise InvalidParameter(
                f"`{name}` is {value}, more than this gateway allows ({limit}).", param=name
            )
        found = value if found is None else min(found, value)
    return found
