"""The Responses API end to end on CPU: the openai SDK's ``client.responses`` -> the gateway
(translating to chat completions) -> Ray Serve LLM -> vLLM, on both apps (PD and colocated).

The usage the SDK reads in the response (or in ``response.completed``) must be the one vLLM
reported for the chat completion it served, and the ledger's row must say the same.
"""

from __future__ import annotations

import sqlite3
import time
from typing import Any

import openai
import pytest
from openai.types.responses import ResponseStreamEvent
from pydantic import TypeAdapter

from serve_app.doctor import unique_prompt
from serve_app.local import LocalState
from tests.conformance.httpx_check import checked_openai
from tests.conformance.openapi_check import VLLM_NULLS
from tests.e2e.conftest import STACK_TIMEOUT
from tests.gatewayproc import GatewayProcess

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(STACK_TIMEOUT + 300)]

MODELS = ("tiny-pd", "tiny")  # PD pool, colocated pool
EVENTS: TypeAdapter[Any] = TypeAdapter(ResponseStreamEvent)
WEATHER = {
    "type": "function",
    "name": "get_weather",
    "description": "The weather in a city.",
    "parameters": {
        "type": "object",
        "properties": {"city": {"type": "string", "maxLength": 8}},
        "required": ["city"],
        "additionalProperties": False,
    },
}


def client(gateway: GatewayProcess) -> openai.OpenAI:
    # Every whole answer checked against OpenAI's document (tests/conformance), but for the nulls
    # vLLM sends where the document has none (named in VLLM_NULLS, relayed untouched).
    return checked_openai(gateway.base_url, VLLM_NULLS, timeout=120)


def ledger_row(gateway: GatewayProcess, request_id: str, timeout: float = 10) -> dict[str, Any]:
    """The request's usage row, read with sqlite3 from the store the gateway fixture made."""
    deadline = time.monotonic() + timeout
    with sqlite3.connect(gateway.log_path.parent / "gateway.db") as db:
        db.row_factory = sqlite3.Row
        while time.monotonic() < deadline:
            query = "SELECT * FROM usage_ledger WHERE request_id = ?"
            row = db.execute(query, (request_id,)).fetchone()
            if row is not None:
                return dict(row)
            time.sleep(0.1)
    raise AssertionError(f"no ledger row for {request_id}")


@pytest.mark.parametrize("model", MODELS)
def test_a_whole_response_carries_vllms_chat_usage(
    local_stack: LocalState, stack_gateway: GatewayProcess, model: str
) -> None:
    prompt = unique_prompt()
    sdk = client(stack_gateway)
    chat = sdk.chat.completions.create(
        model=model, messages=[{"role": "user", "content": prompt}], max_tokens=16, temperature=0
    )
    raw = sdk.responses.with_raw_response.create(
        model=model, input=prompt, max_output_tokens=16, temperature=0
    )
    response = raw.parse()
    assert response.object == "response" and response.status in ("completed", "incomplete")
    assert response.output_text == chat.choices[0].message.content  # greedy: the same answer
    assert chat.usage is not None and response.usage is not None
    assert response.usage.input_tokens == chat.usage.prompt_tokens
    assert response.usage.output_tokens == chat.usage.completion_tokens
    row = ledger_row(stack_gateway, raw.headers["x-gateway-request-id"])
    assert row["operation"] == "responses" and row["pool"] == raw.headers["x-gateway-pool"]
    assert (row["input_tokens"], row["output_tokens"]) == (
        response.usage.input_tokens,
        response.usage.output_tokens,
    )


@pytest.mark.parametrize("model", MODELS)
def test_a_streamed_response_is_typed_event_by_event(
    local_stack: LocalState, stack_gateway: GatewayProcess, model: str
) -> None:
    with client(stack_gateway).responses.with_streaming_response.create(
        model=model, input=unique_prompt(), max_output_tokens=16, temperature=0, stream=True
    ) as raw:
        request_id = raw.headers["x-gateway-request-id"]
        events = list(raw.parse())
    for event in events:
        EVENTS.validate_python(event.model_dump(mode="json", exclude_unset=True), strict=True)
    assert [e.sequence_number for e in events] == list(range(len(events)))
    assert events[0].type == "response.created"
    assert events[-1].type in ("response.completed", "response.incomplete")
    final = events[-1].response
    deltas = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    assert final.output_text == deltas
    assert final.usage is not None and 0 < final.usage.output_tokens <= 16
    row = ledger_row(stack_gateway, request_id)
    assert row["operation"] == "responses"
    assert (row["input_tokens"], row["output_tokens"]) == (
        final.usage.input_tokens,
        final.usage.output_tokens,
    )


def test_a_function_tool_round_trip(local_stack: LocalState, stack_gateway: GatewayProcess) -> None:
    """The stack's vLLM runs without a tool-call parser, so it cannot make the call itself (a
    named ``tool_choice`` is its 400, passed through); the round trip's return leg is what the
    translation must get right: the call and its output, as items, become the assistant's
    ``tool_calls`` and a ``tool`` message that the real chat template renders and answers. No
    tools are offered on the return leg: with tools, vLLM's default ``auto`` choice also needs
    the parser."""
    sdk = client(stack_gateway)
    question: list[Any] = [{"role": "user", "content": "What is the weather in Oslo?"}]
    with pytest.raises(openai.BadRequestError, match="tool-call-parser"):
        sdk.responses.create(
            model="tiny",
            input=question,
            tools=[WEATHER],
            tool_choice={"type": "function", "name": "get_weather"},
            max_output_tokens=16,
        )
    follow_up = [
        *question,
        {"type": "function_call", "call_id": "call_1", "name": "get_weather", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "call_1", "output": '{"sky": "clear"}'},
    ]
    for stream in (False, True):
        if stream:
            events = list(
                sdk.responses.create(
                    model="tiny", input=follow_up, max_output_tokens=16, stream=True
                )
            )
            assert events[-1].type in ("response.completed", "response.incomplete")
            final = events[-1].response
        else:
            final = sdk.responses.create(model="tiny", input=follow_up, max_output_tokens=16)
        assert final.output and final.output[0].type == "message"
        assert final.usage is not None and final.usage.output_tokens > 0


def test_stored_responses_over_three_turns(
    local_stack: LocalState, stack_gateway: GatewayProcess
) -> None:
    """The gateway keeps what Ray Serve LLM's ingress cannot: ``store`` default and false,
    ``previous_response_id`` over three turns (the second returns a function call's output, the
    leg this stack's vLLM serves without a tool-call parser), retrieve, input items, delete. Each
    follow-up reaches vLLM as the whole conversation: its prompt grows by what came before."""
    sdk = client(stack_gateway)
    unstored = sdk.responses.create(model="tiny", input="Hi", max_output_tokens=16, store=False)
    with pytest.raises(openai.NotFoundError):
        sdk.responses.retrieve(unstored.id)
    first = sdk.responses.create(
        model="tiny", input=unique_prompt(), max_output_tokens=16, temperature=0
    )
    assert first.store is True
    assert sdk.responses.retrieve(first.id).output_text == first.output_text
    returned = [
        {"type": "function_call", "call_id": "call_1", "name": "get_weather", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "call_1", "output": '{"sky": "clear"}'},
    ]
    second = sdk.responses.create(
        model="tiny", input=returned, previous_response_id=first.id, max_output_tokens=16
    )
    events = list(
        sdk.responses.create(
            model="tiny",
            input="And tomorrow?",
            previous_response_id=second.id,
            max_output_tokens=16,
            stream=True,
        )
    )
    assert events[-1].type in ("response.completed", "response.incomplete")
    third = events[-1].response
    assert third.previous_response_id == second.id
    prompts = [r.usage.input_tokens for r in (first, second, third) if r.usage is not None]
    assert len(prompts) == 3 and prompts[0] < prompts[1] < prompts[2]
    assert sdk.responses.retrieve(third.id).output_text == third.output_text
    items = list(sdk.responses.input_items.list(third.id, order="asc"))
    assert [i.type for i in items] == [
        "message", "message", "function_call", "function_call_output", "message", "message",
    ]  # fmt: skip
    sdk.responses.delete(third.id)
    with pytest.raises(openai.NotFoundError):
        sdk.responses.retrieve(third.id)
