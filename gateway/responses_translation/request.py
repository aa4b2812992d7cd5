"""A Responses API request translated into a chat completions request: small pure functions.

    chat = to_chat(payload)                      # the chat request, or a 400 naming the field
    request = parse_responses(body, limit)       # what the pipeline runs: the translation,
                                                 # with the client's own body as its source

Translated: ``input`` (a string, or message / ``function_call`` / ``function_call_output``
items), ``instructions`` (a system message first), ``max_output_tokens``, ``temperature``,
``top_p``, ``stop``, ``user``, function ``tools``, ``tool_choice``, ``parallel_tool_calls``,
``text.format`` (JSON schema or JSON object output) and ``stream``. ``metadata`` is checked and
echoed in the answer only. Fields the Responses API has and chat has not (``reasoning``,
``include``, ``truncation``...) are dropped; fields of neither (vLLM's ``top_k``, ``seed``...)
pass through, as on every other endpoint.

A continued conversation (``previous_response_id``) arrives here already looked up: its earlier
items are passed as ``history`` and translated before the new ``input``
(gateway/response_store/ keeps and finds them); ``instructions`` are this request's own, as the
API defines them.

Refused with a 400 that says so: ``conversation`` (the Conversations API), ``item_reference``,
``background``, prompt templates, built-in tools (web search, file search...) and files.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

import orjson

from gateway.errors import InvalidJSON, InvalidParameter
from gateway.wire.request import (
    DEFAULT_SHAPE,
    BodyShape,
    Operation,
    ParsedRequest,
    check_openai_fields,
    check_range,
    integral,
    load_object,
    parse_payload,
)

Json = dict[str, Any]

MAX_TOOLS = 128
MIN_OUTPUT_TOKENS = 16
MAX_METADATA = 16
MAX_METADATA_KEY = 64
MAX_METADATA_VALUE = 512

_TRANSLATED = frozenset(
    {
        "model",
        "input",
        "instructions",
        "max_output_tokens",
        "temperature",
        "top_p",
        "stop",
        "user",
        "tools",
        "tool_choice",
        "parallel_tool_calls",
        "text",
        "metadata",
        "stream",
        "store",
        "previous_response_id",
    }
)
# The Responses API's own fields that chat completions has no place for: dropped.
_DROPPED = frozenset(
    {
        "include",
        "reasoning",
        "truncation",
        "service_tier",
        "stream_options",
        "prompt_cache_key",
        "prompt_cache_retention",
        "safety_identifier",
        "max_tool_calls",
        "top_logprobs",
    }
)
_NO_CONVERSATIONS = (
    "Conversations and item references are not supported by this gateway: continue with "
    "`previous_response_id`, or send the whole conversation in `input`."
)
_REFUSED = {
    "conversation": _NO_CONVERSATIONS,
    "background": "Background responses are not supported by this gateway.",
    "prompt": "Prompt templates are not supported by this gateway.",
}
_ROLES = {"user": "user", "system": "system", "developer": "system", "assistant": "assistant"}
_TEXT_PARTS = frozenset({"input_text", "output_text", "text", "refusal"})


def _bad(message: str, param: str, code: str = "invalid_value") -> InvalidParameter:
    return InvalidParameter(message, param=param, code=code)


def parse_responses(
    body: bytes, max_tokens_limit: int, shape: BodyShape = DEFAULT_SHAPE
) -> ParsedRequest:
    """The request the pipeline runs: the chat translation, the client's body as its source."""
    return translate(load_object(body, shape), max_tokens_limit, shape)


def with_default_model(source: Json, default_model: str | None) -> Json:
    """``source`` with the configured model when it names none (``responses.default_model``)."""
    if default_model is None or source.get("model") is not None:
        return source
    return {**source, "model": default_model}


def translate(
    source: Mapping[str, Any],
    max_tokens_limit: int,
    shape: BodyShape = DEFAULT_SHAPE,
    history: Sequence[Mapping[str, Any]] = (),
) -> ParsedRequest:
    """``source`` (the client's body, parsed) translated, after the ``history`` it continues."""
    chat = to_chat(source, history)
    cap = chat.get("max_tokens")
    if isinstance(cap, int) and cap > max_tokens_limit:
        raise _bad(
            f"`max_output_tokens` is {cap}, more than this gateway allows ({max_tokens_limit}).",
            "max_output_tokens",
        )
    try:
        chat_body = orjson.dumps(chat)
    except TypeError as err:  # nested deeper than orjson writes
        raise InvalidJSON(f"The request body cannot be forwarded: {err}.") from None
    request = parse_payload(Operation.RESPONSES, chat, chat_body, max_tokens_limit, shape)
    return dataclasses.replace(request, source=source)


def to_chat(payload: Mapping[str, Any], history: Sequence[Mapping[str, Any]] = ()) -> Json:
    """The chat completions request for a Responses request (see the module docstring)."""
    _refuse_unsupported(payload)
    check_openai_fields(payload)  # top_logprobs among them: dropped below, checked still
    chat: Json = {k: v for k, v in payload.items() if k not in _TRANSLATED | _DROPPED}
    if "model" in payload:
        chat["model"] = payload["model"]
    if "input" not in payload:
        raise _bad("`input` is required.", "input", "missing_required_parameter")
    chat["messages"] = to_messages(payload["input"], payload.get("instructions"), history)
    chat.update(_sampling(payload))
    chat.update(_tooling(payload))
    response_format = to_response_format(payload.get("text"))
    if response_format is not None:
        chat["response_format"] = response_format
    check_metadata(payload.get("metadata"))
    if payload.get("stream") is True:
        # Always asked for: the translation reports usage in response.completed.
        chat["stream"] = True
        chat["stream_options"] = {"include_usage": True}
    elif "stream" in payload:
        chat["stream"] = payload["stream"]  # False, or a wrong type the parse stage refuses
    return chat


def _refuse_unsupported(payload: Mapping[str, Any]) -> None:
    for name, message in _REFUSED.items():
        if payload.get(name) not in (None, False):
            raise _bad(message, name, "unsupported_parameter")


def _sampling(payload: Mapping[str, Any]) -> Json:
    out: Json = {}
    given = payload.get("max_output_tokens")
    if given is not None:
        # OpenAI's minimum (its OpenAPI document): 16. 1.0 is an integer, as everywhere.
        check_range(payload, "max_output_tokens", MIN_OUTPUT_TOKENS, None, integer=True)
        out["max_tokens"] = integral(given)
    for name in ("temperature", "top_p", "stop", "user"):
        if payload.get(name) is not None:
            out[name] = payload[name]
    return out


def _tooling(payload: Mapping[str, Any]) -> Json:
    out: Json = {}
    tools = payload.get("tools")
    if tools is not None:
        if not isinstance(tools, list):
            raise _bad("`tools` must be an array.", "tools")
        if len(tools) > MAX_TOOLS:
            raise _bad(f"`tools` has more than {MAX_TOOLS} entries.", "tools")
        if tools:
            out["tools"] = [to_chat_tool(tool, f"tools[{i}]") for i, tool in enumerate(tools)]
    if payload.get("tool_choice") is not None:
        out["tool_choice"] = to_chat_tool_choice(payload["tool_choice"])
    if payload.get("parallel_tool_calls") is not None:
        out["parallel_tool_calls"] = payload["parallel_tool_calls"]
    return out


# --- input ---------------------------------------------------------------------------------


def to_messages(
    items: object, instructions: object, history: Sequence[Mapping[str, Any]] = ()
) -> list[Json]:
    """Chat messages for ``input`` (a string or a list of items), ``instructions`` first, then
    the ``history`` a continued conversation brings (items the gateway stored)."""
    messages: list[Json] = []
    if instructions is not None:
        if not isinstance(instructions, str):
            raise _bad("`instructions` must be a string.", "instructions")
        messages.append({"role": "system", "content": instructions})
    for item in history:
        add_item(messages, item, "previous_response_id")
    if isinstance(items, str):
        messages.append({"role": "user", "content": items})
    elif isinstance(items, list):
        for index, item in enumerate(items):
            add_item(messages, item, f"input[{index}]")
    else:
        raise _bad("`input` must be a string or an array of input items.", "input")
    if not messages:
        raise _bad("`input` must not be empty.", "input")
    return messages


def add_item(messages: list[Json], item: object, param: str) -> None:
    """Append the chat message for one input item (a function call joins the assistant
    message before it, so parallel calls stay one assistant turn)."""
    if not isinstance(item, dict):
        raise _bad("Each input item must be an object.", param)
    kind = item.get("type", "message")
    if kind == "message":
        messages.append(to_message(item, param))
    elif kind == "function_call":
        call = to_tool_call(item, param)
        last = messages[-1] if messages else None
        if last is not None and last["role"] == "assistant" and "tool_calls" in last:
            last["tool_calls"].append(call)
        else:
            messages.append({"role": "assistant", "content": None, "tool_calls": [call]})
    elif kind == "function_call_output":
        call_id = _string(item, "call_id", param)
        output = text_of(item.get("output"), f"{param}.output")
        messages.append({"role": "tool", "tool_call_id": call_id, "content": output})
    elif kind == "reasoning":
        return  # an earlier turn's reasoning: chat completions takes none back
    elif kind == "item_reference":
        raise _bad(_NO_CONVERSATIONS, f"{param}.type", "unsupported_value")
    else:
        raise _bad(
            f"Input items of type `{_shown(kind)}` are not supported by this gateway "
            "(messages, function_call and function_call_output are).",
            f"{param}.type",
            "unsupported_value",
        )


def to_message(item: Mapping[str, Any], param: str) -> Json:
    given = item.get("role")
    # A client's role or part type may be any JSON value: only a string is looked up (a list or
    # an object is unhashable and would fail the lookup itself).
    role = _ROLES.get(given) if isinstance(given, str) else None
    if role is None:
        raise _bad("A message's `role` must be user, system, developer or assistant.", param)
    content = item.get("content")
    if isinstance(content, str):
        return {"role": role, "content": content}
    if not isinstance(content, list):
        raise _bad("A message's `content` must be a string or an array of parts.", param)
    parts = [to_part(part, f"{param}.content[{i}]") for i, part in enumerate(content)]
    if all(p["type"] == "text" for p in parts):
        # One string: every chat template takes it (some take no parts).
        return {"role": role, "content": "".join(p["text"] for p in parts)}
    if role != "user":
        raise _bad("Only user messages may carry images.", param)
    return {"role": role, "content": parts}


def to_part(part: object, param: str) -> Json:
    if not isinstance(part, dict):
        raise _bad("A content part must be an object.", param)
    kind = part.get("type")
    if isinstance(kind, str) and kind in _TEXT_PARTS:
        text = part.get("refusal") if kind == "refusal" else part.get("text")
        if not isinstance(text, str):
            raise _bad("A text part needs its `text`.", param)
        return {"type": "text", "text": text}
    if kind == "input_image" and isinstance(part.get("image_url"), str):
        image: Json = {"url": part["image_url"]}
        if part.get("detail") in ("low", "high", "auto"):
            image["detail"] = part["detail"]
        return {"type": "image_url", "image_url": image}
    raise _bad(
        f"Content parts of type `{_shown(kind)}` are not supported by this gateway "
        "(text, and images by URL, are).",
        f"{param}.type",
        "unsupported_value",
    )


def to_tool_call(item: Mapping[str, Any], param: str) -> Json:
    arguments = item.get("arguments", "")
    if not isinstance(arguments, str):
        raise _bad("A function call's `arguments` must be a string (JSON).", param)
    return {
        "id": _string(item, "call_id", param),
        "type": "function",
        "function": {"name": _string(item, "name", param), "arguments": arguments},
    }


def text_of(output: object, param: str) -> str:
    """A function call's output: a string, or text parts joined."""
    if isinstance(output, str):
        return output
    if isinstance(output, list):
        return "".join(to_part(p, f"{param}[{i}]")["text"] for i, p in enumerate(output))
    raise _bad("A function call output must be a string or an array of text parts.", param)


# --- tools and output format ---------------------------------------------------------------


def to_chat_tool(tool: object, param: str) -> Json:
    if not isinstance(tool, dict):
        raise _bad("Each tool must be an object.", param)
    kind = tool.get("type")
    if kind != "function":
        raise _bad(
            f"Built-in tools (`{_shown(kind)}`) are not supported by this gateway: only tools "
            "of type `function` are.",
            f"{param}.type",
            "unsupported_value",
        )
    function: Json = {"name": _string(tool, "name", param)}
    for name in ("description", "parameters", "strict"):
        if tool.get(name) is not None:
            function[name] = tool[name]
    return {"type": "function", "function": function}


def to_chat_tool_choice(choice: object) -> object:
    if choice in ("auto", "none", "required"):
        return choice
    if isinstance(choice, dict) and choice.get("type") == "function":
        return {"type": "function", "function": {"name": _string(choice, "name", "tool_choice")}}
    raise _bad(
        "`tool_choice` must be auto, none, required or {type: function, name}: built-in and "
        "allowed-tools choices are not supported by this gateway.",
        "tool_choice",
        "unsupported_value",
    )


def to_response_format(text: object) -> Json | None:
    """Chat's ``response_format`` for ``text.format`` (None: plain text)."""
    if text is None:
        return None
    if not isinstance(text, dict):
        raise _bad("`text` must be an object.", "text")
    fmt = text.get("format")
    if fmt is None:
        return None
    kind = fmt.get("type") if isinstance(fmt, dict) else None
    if kind == "text":
        return None
    if kind == "json_object":
        return {"type": "json_object"}
    if kind == "json_schema":
        assert isinstance(fmt, dict)
        if not isinstance(fmt.get("schema"), dict):
            raise _bad("`text.format.schema` must be a JSON schema object.", "text.format.schema")
        schema: Json = {"name": _string(fmt, "name", "text.format"), "schema": fmt["schema"]}
        for name in ("description", "strict"):
            if fmt.get(name) is not None:
                schema[name] = fmt[name]
        return {"type": "json_schema", "json_schema": schema}
    raise _bad("`text.format.type` must be text, json_object or json_schema.", "text.format.type")


def check_metadata(metadata: object) -> None:
    """OpenAI's bounds: at most 16 pairs of strings, keys of 64 and values of 512 characters."""
    if metadata is None:
        return
    if not isinstance(metadata, dict) or len(metadata) > MAX_METADATA:
        raise _bad(f"`metadata` must be an object of at most {MAX_METADATA} pairs.", "metadata")
    for key, value in metadata.items():
        if len(key) > MAX_METADATA_KEY or not isinstance(value, str):
            raise _bad(
                f"`metadata` keys are at most {MAX_METADATA_KEY} characters, values strings.",
                "metadata",
            )
        if len(value) > MAX_METADATA_VALUE:
            raise _bad(
                f"`metadata` values are at most {MAX_METADATA_VALUE} characters.", "metadata"
            )


def _string(item: Mapping[str, Any], name: str, param: str) -> str:
    value = item.get(name)
    if not isinstance(value, str) or not value:
        raise _bad(f"`{name}` is required and must be a non-empty string.", f"{param}.{name}")
    return value


def _shown(value: object) -> str:
    """A client's value in an error message, bounded."""
    return str(value)[:64]
