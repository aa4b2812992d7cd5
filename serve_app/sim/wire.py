"""The OpenAI wire format as vLLM emits it: response bodies, stream chunks, errors.

Chat and text completions differ only in their object names and where the text sits, so each
is one :class:`WireFormat`; the request handling in ``app.py`` is shared.
"""

from __future__ import annotations

import http
from dataclasses import dataclass
from typing import Any

import orjson

from serve_app.sim.tools import ToolCall

SSE_DONE = b"data: [DONE]\n\n"

# vLLM's error ``type`` per status; other statuses use the HTTP phrase, as vLLM does.
_ERROR_TYPES = {
    400: "BadRequestError",
    404: "NotFoundError",
    422: "UnprocessableEntityError",
    500: "InternalServerError",
    501: "NotImplementedError",
    503: "ServiceUnavailableError",
}


def error_body(status: int, message: str, param: str | None = None) -> bytes:
    """vLLM's error body: ``{"error": {"message", "type", "param", "code": <status>}}``."""
    try:
        phrase = http.HTTPStatus(status).phrase
    except ValueError:
        phrase = "Error"
    error_type = _ERROR_TYPES.get(status, phrase)
    return orjson.dumps(
        {"error": {"message": message, "type": error_type, "param": param, "code": status}}
    )


def sse(payload: dict[str, Any]) -> bytes:
    """One server-sent event exactly as vLLM frames it: ``data: {json}\\n\\n``."""
    return b"data: " + orjson.dumps(payload) + b"\n\n"


def usage(
    prompt_tokens: int, completion_tokens: int, cached_tokens: int | None = None
) -> dict[str, Any]:
    """The ``usage`` object of a response or of the final stream chunk.

    ``cached_tokens`` (the capacity model's prefix-cache hit) adds
    ``prompt_tokens_details.cached_tokens``, as vLLM does with ``--enable-prompt-tokens-details``.
    """
    out: dict[str, Any] = {
        "prompt_tokens": prompt_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
        "completion_tokens": completion_tokens,
    }
    if cached_tokens is not None:
        out["prompt_tokens_details"] = {"cached_tokens": cached_tokens}
    return out


@dataclass(frozen=True, slots=True)
class Completion:
    """Identity of one response: shared by all of its chunks."""

    id: str
    created: int
    model: str


class WireFormat:
    """Chat completions (``chat.completion``) vs text completions (``text_completion``)."""

    id_prefix = "cmpl-"
    object_name = "text_completion"
    chunk_object_name = "text_completion"
    has_role_chunk = False

    def _head(self, c: Completion, object_name: str) -> dict[str, Any]:
        return {"id": c.id, "object": object_name, "created": c.created, "model": c.model}

    def choice(self, text: str, finish_reason: str | None, index: int = 0) -> dict[str, Any]:
        return {
            "index": index,
            "text": text,
            "logprobs": None,
            "finish_reason": finish_reason,
            "stop_reason": None,
        }

    def delta_choice(self, text: str, finish_reason: str | None, index: int = 0) -> dict[str, Any]:
        return self.choice(text, finish_reason, index)

    def role_chunk(self, c: Completion) -> bytes:
        raise NotImplementedError("text completions have no role chunk")

    def token_chunk(
        self, c: Completion, text: str, finish_reason: str | None, index: int = 0
    ) -> bytes:
        chunk = self._head(c, self.chunk_object_name)
        chunk["choices"] = [self.delta_choice(text, finish_reason, index)]
        return sse(chunk)

    def usage_chunk(
        self,
        c: Completion,
        prompt_tokens: int,
        completion_tokens: int,
        cached_tokens: int | None = None,
    ) -> bytes:
        chunk = self._head(c, self.chunk_object_name)
        chunk["choices"] = []
        chunk["usage"] = usage(prompt_tokens, completion_tokens, cached_tokens)
        return sse(chunk)

    def response(
        self,
        c: Completion,
        texts: list[str],
        finish_reason: str,
        prompt_tokens: int,
        completion_tokens: int,
        cached_tokens: int | None = None,
    ) -> bytes:
        """One choice per text (``n``)."""
        body = self._head(c, self.object_name)
        body["choices"] = [self.choice(t, finish_reason, i) for i, t in enumerate(texts)]
        body["usage"] = usage(prompt_tokens, completion_tokens, cached_tokens)
        return orjson.dumps(body)


class ChatWireFormat(WireFormat):
    """``/v1/chat/completions``: a message or delta with ``role`` and ``content``."""

    id_prefix = "chatcmpl-"
    object_name = "chat.completion"
    chunk_object_name = "chat.completion.chunk"
    has_role_chunk = True

    def choice(self, text: str, finish_reason: str | None, index: int = 0) -> dict[str, Any]:
        return {
            "index": index,
            "message": {"role": "assistant", "content": text, "refusal": None, "tool_calls": []},
            "logprobs": None,
            "finish_reason": finish_reason,
            "stop_reason": None,
        }

    def delta_choice(self, text: str, finish_reason: str | None, index: int = 0) -> dict[str, Any]:
        return {
            "index": index,
            "delta": {"content": text},
            "logprobs": None,
            "finish_reason": finish_reason,
        }

    def tool_chunk(self, c: Completion, call: ToolCall, k: int, finish_reason: str | None) -> bytes:
        """Piece ``k`` of a function call's arguments; the first piece also names the call."""
        function: dict[str, Any] = {"arguments": call.pieces[k]}
        delta: dict[str, Any] = {"index": 0, "function": function}
        if k == 0:
            delta.update(id=call.id, type="function")
            function["name"] = call.name
        chunk = self._head(c, self.chunk_object_name)
        chunk["choices"] = [
            {
                "index": 0,
                "delta": {"tool_calls": [delta]},
                "logprobs": None,
                "finish_reason": finish_reason,
            }
        ]
        return sse(chunk)

    def tool_response(
        self,
        c: Completion,
        call: ToolCall,
        prompt_tokens: int,
        completion_tokens: int,
        cached_tokens: int | None = None,
    ) -> bytes:
        """A whole answer that calls a function, as vLLM answers it."""
        body = self._head(c, self.object_name)
        function = {"name": call.name, "arguments": call.arguments}
        message = {
            "role": "assistant",
            "content": None,
            "refusal": None,
            "tool_calls": [{"id": call.id, "type": "function", "function": function}],
        }
        body["choices"] = [
            {"index": 0, "message": message, "logprobs": None, "finish_reason": "tool_calls"}
        ]
        body["usage"] = usage(prompt_tokens, completion_tokens, cached_tokens)
        return orjson.dumps(body)

    def role_chunk(self, c: Completion) -> bytes:
        # vLLM opens every chat stream with an empty assistant delta.
        chunk = self._head(c, self.chunk_object_name)
        chunk["choices"] = [
            {
                "index": 0,
                "delta": {"role": "assistant", "content": ""},
                "logprobs": None,
                "finish_reason": None,
            }
        ]
        return sse(chunk)


def models_body(models: tuple[str, ...], max_model_len: int, created: int) -> bytes:
    """``GET /v1/models`` as vLLM lists its served models."""
    cards = [
        {
            "id": name,
            "object": "model",
            "created": created,
            "owned_by": "vllm",
            "root": name,
            "parent": None,
            "max_model_len": max_model_len,
            "permission": [
                {
                    "id": f"modelperm-sim-{index}",
                    "object": "model_permission",
                    "created": created,
                    "allow_create_engine": False,
                    "allow_sampling": True,
                    "allow_logprobs": True,
                    "allow_search_indices": False,
                    "allow_view": True,
                    "allow_fine_tuning": False,
                    "organization": "*",
                    "group": None,
                    "is_blocking": False,
                }
            ],
        }
        for index, name in enumerate(models)
    ]
    return orjson.dumps({"object": "list", "data": cards})


def embeddings_body(
    model: str, vectors: list[list[float]], prompt_tokens: int, response_id: str, created: int
) -> bytes:
    """``POST /v1/embeddings`` response."""
    data = [
        {"index": i, "object": "embedding", "embedding": vector} for i, vector in enumerate(vectors)
    ]
    return orjson.dumps(
        {
            "id": response_id,
            "object": "list",
            "created": created,
            "model": model,
            "data": data,
            "usage": {"prompt_tokens": prompt_tokens, "total_tokens": prompt_tokens},
        }
    )
