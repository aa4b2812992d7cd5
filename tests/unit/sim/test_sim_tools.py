"""The simulator calls functions the way vLLM answers them, checked with the real openai SDK."""

from __future__ import annotations

import json
from typing import Any

import openai

from serve_app.sim.tools import plan_tool_call
from tests.simproc import SimProcess
from tests.unit.sim.sim_args import MODELS

TOOLS: list[Any] = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "parameters": {
                "type": "object",
                "properties": {"city": {"type": "string"}, "days": {"type": "integer"}},
            },
        },
    },
    {"type": "function", "function": {"name": "other"}},
]
ASK = [{"role": "user", "content": "weather in Oslo"}]


def client(sim: SimProcess) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=sim.base_url, api_key="sim", max_retries=0)


async def test_a_whole_answer_calls_the_first_tool(fast_sim: SimProcess) -> None:
    async with client(fast_sim) as c:
        r = await c.chat.completions.create(model=MODELS[0], messages=ASK, tools=TOOLS)
    choice = r.choices[0]
    assert choice.finish_reason == "tool_calls" and choice.message.content is None
    (call,) = choice.message.tool_calls or []
    assert call.function.name == "get_weather"  # type: ignore[union-attr]
    arguments = json.loads(call.function.arguments)  # type: ignore[union-attr]
    assert set(arguments) == {"city", "days"} and arguments["days"] == 1
    assert r.usage is not None and r.usage.completion_tokens > 0


async def test_a_stream_sends_the_arguments_in_pieces(fast_sim: SimProcess) -> None:
    async with client(fast_sim) as c:
        stream = await c.chat.completions.create(
            model=MODELS[0],
            messages=ASK,
            tools=TOOLS,
            tool_choice={"type": "function", "function": {"name": "other"}},
            stream=True,
            stream_options={"include_usage": True},
            max_tokens=3,
        )
        chunks = [chunk async for chunk in stream]
    deltas = [
        call
        for chunk in chunks
        if chunk.choices
        for call in chunk.choices[0].delta.tool_calls or []
    ]
    assert deltas[0].id and deltas[0].function.name == "other"  # type: ignore[union-attr]
    assert "".join(d.function.arguments or "" for d in deltas) == "{}"  # type: ignore[union-attr]
    assert chunks[-2].choices[0].finish_reason == "tool_calls"
    assert chunks[-1].usage is not None and chunks[-1].usage.completion_tokens == len(deltas)


def test_no_call_after_a_tool_result_or_with_tool_choice_none() -> None:
    tool_result = [*ASK, {"role": "tool", "tool_call_id": "c", "content": "sunny"}]
    assert plan_tool_call({"messages": tool_result, "tools": TOOLS}, 1, 16) is None
    assert plan_tool_call({"messages": ASK, "tools": TOOLS, "tool_choice": "none"}, 1, 16) is None
    call = plan_tool_call({"messages": ASK, "tools": TOOLS}, 1, 2)
    assert call is not None and len(call.pieces) <= 2  # at most max_tokens pieces
