"""Responses request -> chat request, field by field, and what is refused."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from gateway.errors import InvalidParameter
from gateway.responses_translation.request import parse_responses, to_chat
from gateway.tokens import TokenCounter, TokenizerConfig
from gateway.wire.request import Operation


def chat(**payload: Any) -> dict[str, Any]:
    return to_chat({"model": "m", "input": "hi", **payload})


def test_a_string_input_is_one_user_message_after_the_instructions() -> None:
    assert chat(instructions="Be brief.")["messages"] == [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "hi"},
    ]


def test_items_become_messages_and_parallel_calls_one_assistant_turn() -> None:
    items = [
        {"role": "developer", "content": [{"type": "input_text", "text": "rules"}]},
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "a"}]},
        {"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{}"},
        {"type": "function_call", "call_id": "c2", "name": "g", "arguments": '{"x":1}'},
        {"type": "function_call_output", "call_id": "c1", "output": "one"},
        {
            "type": "function_call_output",
            "call_id": "c2",
            "output": [{"type": "input_text", "text": "two"}],
        },
        {"type": "reasoning", "id": "r", "summary": []},
        {
            "role": "assistant",
            "content": [{"type": "output_text", "text": "ok", "annotations": []}],
        },
    ]
    messages = chat(input=items)["messages"]
    assert messages == [
        {"role": "system", "content": "rules"},
        {"role": "user", "content": "a"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}},
                {"id": "c2", "type": "function", "function": {"name": "g", "arguments": '{"x":1}'}},
            ],
        },
        {"role": "tool", "tool_call_id": "c1", "content": "one"},
        {"role": "tool", "tool_call_id": "c2", "content": "two"},
        {"role": "assistant", "content": "ok"},
    ]


def test_an_image_by_url_stays_a_part() -> None:
    content = [
        {"type": "input_text", "text": "what is this"},
        {"type": "input_image", "image_url": "https://x/y.png", "detail": "low"},
    ]
    (message,) = chat(input=[{"role": "user", "content": content}])["messages"]
    assert message["content"][1] == {
        "type": "image_url",
        "image_url": {"url": "https://x/y.png", "detail": "low"},
    }


def test_sampling_tools_and_format_are_translated() -> None:
    schema = {"type": "object", "properties": {"a": {"type": "string"}}}
    got = chat(
        max_output_tokens=17,
        temperature=0.5,
        top_p=0.9,
        stop=["\n"],
        user="u1",
        tools=[{"type": "function", "name": "f", "parameters": schema, "strict": True}],
        tool_choice={"type": "function", "name": "f"},
        parallel_tool_calls=False,
        text={"format": {"type": "json_schema", "name": "out", "schema": schema, "strict": True}},
        metadata={"team": "a"},
        reasoning={"effort": "low"},
        top_k=5,  # vLLM's: passes through like on every endpoint
    )
    assert got == {
        "model": "m",
        "messages": [{"role": "user", "content": "hi"}],
        "max_tokens": 17,
        "temperature": 0.5,
        "top_p": 0.9,
        "stop": ["\n"],
        "user": "u1",
        "tools": [
            {"type": "function", "function": {"name": "f", "parameters": schema, "strict": True}}
        ],
        "tool_choice": {"type": "function", "function": {"name": "f"}},
        "parallel_tool_calls": False,
        "response_format": {
            "type": "json_schema",
            "json_schema": {"name": "out", "schema": schema, "strict": True},
        },
        "top_k": 5,
    }


def test_a_stream_always_asks_for_usage() -> None:
    got = chat(stream=True)
    assert got["stream"] is True and got["stream_options"] == {"include_usage": True}
    assert "stream_options" not in chat(stream=False)


@pytest.mark.parametrize(
    ("payload", "param"),
    [
        ({"conversation": "conv_1"}, "conversation"),
        ({"background": True}, "background"),
        ({"prompt": {"id": "p"}}, "prompt"),
        ({"tools": [{"type": "web_search_preview"}]}, "tools[0].type"),
        ({"tools": [{"type": "function"}]}, "tools[0].name"),
        ({"tools": [{"type": "function", "name": "f"}] * 129}, "tools"),
        ({"tool_choice": {"type": "file_search"}}, "tool_choice"),
        ({"input": [{"type": "input_file", "file_id": "f"}]}, "input[0].type"),
        (
            {"input": [{"role": "user", "content": [{"type": "input_file"}]}]},
            "input[0].content[0].type",
        ),
        ({"input": [{"role": "tool", "content": "x"}]}, "input[0]"),
        ({"input": []}, "input"),
        ({"input": 3}, "input"),
        ({"max_output_tokens": True}, "max_output_tokens"),
        ({"metadata": {str(i): "v" for i in range(17)}}, "metadata"),
        ({"metadata": {"k": "v" * 513}}, "metadata"),
        ({"text": {"format": {"type": "json_schema", "name": "x"}}}, "text.format.schema"),
    ],
)
def test_refusals_name_the_field(payload: dict[str, Any], param: str) -> None:
    with pytest.raises(InvalidParameter) as caught:
        chat(**payload)
    assert caught.value.param == param


def test_store_false_is_fine_and_a_missing_input_is_named() -> None:
    assert chat(store=False)["messages"]
    with pytest.raises(InvalidParameter, match="`input` is required"):
        to_chat({"model": "m"})


def test_parse_runs_the_translation_and_keeps_the_source() -> None:
    body = orjson.dumps({"model": "m", "input": "hello world", "max_output_tokens": 19})
    request = parse_responses(body, max_tokens_limit=100)
    assert request.operation is Operation.RESPONSES and request.max_tokens == 19
    assert request.source == orjson.loads(body) and not request.strip_usage
    assert orjson.loads(request.body)["messages"] == [{"role": "user", "content": "hello world"}]
    assert request.native_body("up") == orjson.dumps({**orjson.loads(body), "model": "up"})
    with pytest.raises(InvalidParameter) as caught:
        parse_responses(body, max_tokens_limit=18)
    assert caught.value.param == "max_output_tokens"


def test_the_prompt_is_counted_from_the_translated_messages() -> None:
    counter = TokenCounter(lambda text: len(text.split()), TokenizerConfig())
    request = parse_responses(orjson.dumps({"model": "m", "input": "one two three"}), 100)
    as_chat = counter.count_request(Operation.CHAT, request.payload)
    assert counter.count_request(request.operation, request.payload) == as_chat > 3


def test_an_integral_float_is_an_integer_as_json_schema_says() -> None:
    # The OpenAPI document says integer; JSON Schema counts 652603.0 as one (schemathesis found it).
    assert chat(max_output_tokens=652603.0)["max_tokens"] == 652603


@pytest.mark.parametrize(
    "item",
    [
        # Found by schemathesis: a part type or a role that is a JSON object or array was looked
        # up in a set or dict, which raised TypeError (a 500) instead of a 400.
        {"type": "function_call_output", "call_id": "c", "output": [{"type": {}, "text": "x"}]},
        {"type": "message", "role": "user", "content": [{"type": ["input_text"], "text": "x"}]},
        {"type": "message", "role": {"r": 1}, "content": "x"},
        {"type": "message", "role": [], "content": "x"},
    ],
)
def test_a_type_or_role_of_any_json_value_is_a_400(item: dict[str, Any]) -> None:
    with pytest.raises(InvalidParameter):
        chat(input=[item])


def test_a_continued_conversation_comes_after_the_instructions() -> None:
    """The stored history (gateway/response_store/) goes between this request's instructions
    and its new input; ``store`` and ``previous_response_id`` never reach the upstream."""
    history = [
        {"type": "message", "id": "msg_1", "role": "user", "status": "completed",
         "content": [{"type": "input_text", "text": "hi"}]},
        {"type": "message", "id": "msg_2", "role": "assistant", "status": "completed",
         "content": [{"type": "output_text", "text": "hello", "annotations": []}]},
    ]  # fmt: skip
    payload = {
        "model": "m",
        "input": "again",
        "instructions": "Be brief.",
        "store": True,
        "previous_response_id": "resp_1",
    }
    chat = to_chat(payload, history)
    assert chat["messages"] == [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": "hello"},
        {"role": "user", "content": "again"},
    ]
    assert "store" not in chat and "previous_response_id" not in chat
