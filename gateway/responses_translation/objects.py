"""The Responses API's objects built from chat completions: the response, its items, its usage.

Pure functions of values. A :class:`ResponseShell` is what every response object of one request
shares (id, time, model, and the request's settings it echoes)::

    shell = ResponseShell.of(source, request_id="ab12...", created_at=1760000000)
    shell.response("completed", output=[...], usage=Usage(12, 5))
    response_of_chat(shell, chat_document, usage)        # a whole chat answer, translated
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from gateway.values import value
from gateway.wire.usage import Usage

NO_USAGE = Usage(0, 0)
"""What a response states before the upstream has reported (see ``ResponseShell.response``)."""

Json = dict[str, Any]

# chat finish_reason -> the Responses API's reason for an incomplete response
_INCOMPLETE = {"length": "max_output_tokens", "content_filter": "content_filter"}


@value
class ResponseShell:
    id: str
    created_at: int
    model: str
    echo: Json
    """The request's settings, as every response object repeats them."""
    item_prefix: str

    @classmethod
    def of(
        cls,
        source: Mapping[str, Any],
        request_id: str,
        created_at: int,
        *,
        stored: bool = False,
        previous_response_id: str | None = None,
    ) -> ResponseShell:
        """``stored``: the gateway keeps this response (``store`` as every object echoes it)."""
        echo = echo_of(source)
        echo["store"], echo["previous_response_id"] = stored, previous_response_id
        return cls(
            id=response_id_of(request_id),
            created_at=created_at,
            model=str(source.get("model", "")),
            echo=echo,
            item_prefix=request_id,
        )

    def item_id(self, kind: str, index: int) -> str:
        """``msg_...`` or ``fc_...``: unique per request (the gateway's request id) and index."""
        return f"{kind}_{self.item_prefix}{index:03d}"

    def response(
        self,
        status: str,
        output: Sequence[Json] = (),
        usage: Usage | None = None,
        *,
        error: Json | None = None,
        incomplete_reason: str | None = None,
        completed_at: int | None = None,
    ) -> Json:
        """``usage`` None: none reported yet (a response in progress, or one that failed or was
        cut before the upstream's count): zeros, as OpenAI's schema wants an object there and
        the Open Responses schema wants the field present."""
        return {
            "id": self.id,
            "object": "response",
            "created_at": self.created_at,
            "completed_at": completed_at if status == "completed" else None,
            "status": status,
            "model": self.model,
            "output": list(output),
            "error": error,
            "incomplete_details": (
                None if incomplete_reason is None else {"reason": incomplete_reason}
            ),
            "usage": usage_object(NO_USAGE if usage is None else usage),
            **self.echo,
        }


def response_id_of(request_id: str) -> str:
    """A response's id: the gateway's own request id, so it is unique and names its ledger row."""
    return f"resp_{request_id}"


def echo_of(source: Mapping[str, Any]) -> Json:
    """The request settings a response object repeats, in the SDK's shapes: the request's value,
    else the documented default (what the upstream applies when the field is not sent). ``user``
    only when given: the schema has no null for it."""
    tools = source.get("tools") or []
    echo: Json = {
        "instructions": source.get("instructions"),
        "max_output_tokens": source.get("max_output_tokens"),
        "max_tool_calls": source.get("max_tool_calls"),
        "metadata": source.get("metadata") or {},
        "parallel_tool_calls": source.get("parallel_tool_calls", True) is not False,
        "tool_choice": source.get("tool_choice") or "auto",
        "tools": [_function_tool(t) for t in tools if isinstance(t, dict)],
        "text": _text_config(source.get("text")),
        "top_logprobs": 0,  # dropped in translation (request.py): no logprobs are returned
        "reasoning": None,  # chat completions takes no reasoning settings (request.py drops it)
        "service_tier": "default",
        "store": False,
        "background": False,
        "previous_response_id": None,
        "truncation": "disabled",
    }
    for name, default in _ECHOED_DEFAULTS.items():
        given = source.get(name)
        echo[name] = default if given is None else given
    if isinstance(source.get("user"), str):
        echo["user"] = source["user"]
    return echo


# OpenAI's documented defaults for the settings every response object states.
_ECHOED_DEFAULTS: dict[str, object] = {
    "temperature": 1.0,
    "top_p": 1.0,
    "presence_penalty": 0.0,
    "frequency_penalty": 0.0,
    "safety_identifier": None,
    "prompt_cache_key": None,
}


def _function_tool(tool: Mapping[str, Any]) -> Json:
    return {
        "type": "function",
        "name": tool.get("name"),
        "description": tool.get("description"),
        "parameters": tool.get("parameters"),
        "strict": tool.get("strict"),
    }


def _text_config(text: object) -> Json:
    fmt = text.get("format") if isinstance(text, dict) else None
    return {"format": fmt if isinstance(fmt, dict) else {"type": "text"}}


def usage_object(usage: Usage) -> Json:
    """The Responses ``usage``: the upstream's chat usage under the Responses API's names."""
    return {
        "input_tokens": usage.input_tokens,
        "input_tokens_details": {"cached_tokens": usage.cached_tokens, "cache_write_tokens": 0},
        "output_tokens": usage.output_tokens,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": usage.total,
    }


def obj(value: object) -> Mapping[str, Any]:
    """``value`` when it is a JSON object, else an empty one (the upstream's JSON is untyped)."""
    return value if isinstance(value, dict) else {}


def incomplete_reason(finish_reason: str | None) -> str | None:
    return None if finish_reason is None else _INCOMPLETE.get(finish_reason)


def text_part(text: str) -> Json:
    return {"type": "output_text", "text": text, "annotations": [], "logprobs": []}


def message_item(item_id: str, text: str | None, status: str) -> Json:
    """An assistant message; ``text`` None while it has no content part yet."""
    content = [] if text is None else [text_part(text)]
    return {
        "type": "message",
        "id": item_id,
        "role": "assistant",
        "status": status,
        "content": content,
    }


def function_call_item(item_id: str, call_id: str, name: str, arguments: str, status: str) -> Json:
    return {
        "type": "function_call",
        "id": item_id,
        "call_id": call_id,
        "name": name,
        "arguments": arguments,
        "status": status,
    }


def response_of_chat(
    shell: ResponseShell, document: Mapping[str, Any], usage: Usage | None, completed_at: int
) -> Json:
    """A whole chat completion as a response object (its first choice: Responses has no ``n``),
    answered at ``completed_at``."""
    choices = document.get("choices") or [{}]
    choice = obj(choices[0])
    message = obj(choice.get("message"))
    reason = incomplete_reason(choice.get("finish_reason"))
    status = "completed" if reason is None else "incomplete"
    output: list[Json] = []
    content = message.get("content")
    if isinstance(content, str) and content:
        output.append(message_item(shell.item_id("msg", 0), content, status))
    for call in message.get("tool_calls") or ():
        if not isinstance(call, dict):
            continue
        function = obj(call.get("function"))
        output.append(
            function_call_item(
                shell.item_id("fc", len(output)),
                str(call.get("id") or shell.item_id("call", len(output))),
                str(function.get("name") or ""),
                str(function.get("arguments") or ""),
                "completed",
            )
        )
    return shell.response(
        status, output, usage, incomplete_reason=reason, completed_at=completed_at
    )
