"""The real openai SDK's ``client.responses`` through a real gateway process, translated to chat
completions on a real simulator process: whole and streamed answers, a function tool round trip,
every event parsed by the SDK's own types, and the usage it reports equal to the upstream's chat
usage and to the ledger's row."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import openai
import pytest
from openai.types.responses import ResponseStreamEvent
from pydantic import TypeAdapter

from tests.integration.proxy.conftest import MODEL, WEATHER, ledger_row
from tests.simproc import SimProcess

PROMPT = "Tell me about disaggregated serving"
EVENTS: TypeAdapter[Any] = TypeAdapter(ResponseStreamEvent)


def test_a_whole_response_has_the_upstreams_usage(
    client: openai.OpenAI, sim: SimProcess, folder: Path
) -> None:
    with openai.OpenAI(base_url=sim.base_url, api_key="x", max_retries=0) as direct:
        chat = direct.chat.completions.create(
            model=MODEL, messages=[{"role": "user", "content": PROMPT}], max_tokens=16
        )
    raw = client.responses.with_raw_response.create(model=MODEL, input=PROMPT, max_output_tokens=16)
    response = raw.parse()
    # The simulator's answer (16 tokens) fits the cap: it stops by itself.
    assert response.object == "response" and response.status == "completed"
    assert response.completed_at is not None and response.completed_at >= response.created_at
    assert response.output_text == chat.choices[0].message.content
    assert chat.usage is not None and response.usage is not None
    assert response.usage.input_tokens == chat.usage.prompt_tokens
    assert response.usage.output_tokens == chat.usage.completion_tokens == 16
    row = ledger_row(folder, raw.headers["x-gateway-request-id"])
    assert row["operation"] == "responses"
    assert (row["input_tokens"], row["output_tokens"]) == (chat.usage.prompt_tokens, 16)


def test_a_stream_parses_event_by_event_and_its_usage_is_billed(
    client: openai.OpenAI, folder: Path
) -> None:
    with client.responses.with_streaming_response.create(
        model=MODEL,
        input=PROMPT,
        max_output_tokens=16,
        stream=True,
        instructions="Be brief.",
        extra_body={"ignore_eos": True},  # vLLM's: the whole cap, cut by it
    ) as raw:
        request_id = raw.headers["x-gateway-request-id"]
        events = list(raw.parse())
    for event in events:  # the SDK built them; they also pass its types strictly
        EVENTS.validate_python(event.model_dump(mode="json", exclude_unset=True), strict=True)
    assert [e.sequence_number for e in events] == list(range(len(events)))
    assert events[0].type == "response.created" and events[-1].type == "response.incomplete"
    deltas = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    final = events[-1].response
    assert final.output_text == deltas and final.instructions == "Be brief."
    assert final.usage is not None and final.usage.output_tokens == 16
    row = ledger_row(folder, request_id)
    assert row["operation"] == "responses"
    assert (row["input_tokens"], row["output_tokens"]) == (final.usage.input_tokens, 16)


def test_the_stream_helper_accumulates_the_same_response(client: openai.OpenAI) -> None:
    """``responses.stream`` checks every event against the state it builds (item ids, indexes,
    argument deltas). It waits for ``response.completed``, which a function call gets (a text
    answer cut by ``max_output_tokens`` ends with ``response.incomplete``, as OpenAI's do)."""
    question = "What is the weather in Oslo?"
    with client.responses.stream(model=MODEL, input=question, tools=[WEATHER]) as stream:
        deltas = [e.delta for e in stream if e.type == "response.function_call_arguments.delta"]
        final = stream.get_final_response()
    (call,) = final.output
    assert call.type == "function_call" and call.arguments == "".join(deltas)
    assert len(deltas) > 1  # streamed in pieces


@pytest.mark.parametrize("stream", [False, True])
def test_a_function_tool_round_trip(client: openai.OpenAI, stream: bool) -> None:
    question: list[Any] = [{"role": "user", "content": "What is the weather in Oslo?"}]
    first = _respond(client, stream, input=question, tools=[WEATHER])
    (call,) = first.output
    assert call.type == "function_call" and call.name == "get_weather"
    assert set(_json(call.arguments)) == {"city"}
    follow_up = [
        *question,
        *first.output,
        {"type": "function_call_output", "call_id": call.call_id, "output": '{"sky": "clear"}'},
    ]
    second = _respond(client, stream, input=follow_up, tools=[WEATHER])
    assert second.output[0].type == "message" and second.output_text


def _respond(client: openai.OpenAI, stream: bool, **kwargs: Any) -> Any:
    if not stream:
        return client.responses.create(model=MODEL, max_output_tokens=16, **kwargs)
    events = list(client.responses.create(model=MODEL, max_output_tokens=16, stream=True, **kwargs))
    assert events[-1].type in ("response.completed", "response.incomplete")
    return events[-1].response


def _json(text: str) -> dict[str, Any]:
    value = json.loads(text)
    assert isinstance(value, dict)
    return value


def test_refusals_are_the_sdks_errors(client: openai.OpenAI) -> None:
    with pytest.raises(openai.NotFoundError, match="resp_1' not found"):
        client.responses.create(model=MODEL, input=PROMPT, previous_response_id="resp_1")
    with pytest.raises(openai.BadRequestError, match="Conversations"):
        client.responses.create(model=MODEL, input=PROMPT, conversation="conv_1")
    with pytest.raises(openai.BadRequestError, match="Built-in tools"):
        client.responses.create(model=MODEL, input=PROMPT, tools=[{"type": "web_search"}])
