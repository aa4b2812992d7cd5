"""Stored responses as the official openai SDK uses them, through a real gateway process in front
of a real simulator process: ``responses.create`` (whole and streamed, ``store`` omitted and
false), ``previous_response_id`` over three turns with a function call round trip,
``responses.retrieve``, ``responses.input_items.list`` (auto-paginated) and
``responses.delete``; a follow-up's prompt is billed as the whole conversation."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import openai
import pytest

from tests.integration.proxy.conftest import MODEL, WEATHER, ledger_row


def streamed(client: openai.OpenAI, **kwargs: Any) -> Any:
    events = list(client.responses.create(model=MODEL, max_output_tokens=16, stream=True, **kwargs))
    assert events[-1].type in ("response.completed", "response.incomplete")
    return events[-1].response


def test_store_default_keeps_it_and_store_false_does_not(client: openai.OpenAI) -> None:
    kept = client.responses.create(model=MODEL, input="Hello", max_output_tokens=16)
    assert kept.store is True
    again = client.responses.retrieve(kept.id)
    assert again.id == kept.id and again.output_text == kept.output_text
    assert again.usage == kept.usage
    kept_stream = streamed(client, input="Hello again")
    assert client.responses.retrieve(kept_stream.id).output_text == kept_stream.output_text
    for made in (
        client.responses.create(model=MODEL, input="Hi", max_output_tokens=16, store=False),
        streamed(client, input="Hi", store=False),
    ):
        assert made.store is False
        with pytest.raises(openai.NotFoundError):
            client.responses.retrieve(made.id)


@pytest.mark.parametrize("stream", [False, True])
def test_three_turns_with_a_function_call(
    client: openai.OpenAI, folder: Path, stream: bool
) -> None:
    def respond(**kwargs: Any) -> Any:
        if stream:
            return streamed(client, tools=[WEATHER], **kwargs)
        raw = client.responses.with_raw_response.create(
            model=MODEL, max_output_tokens=16, tools=[WEATHER], **kwargs
        )
        billed.append(raw.headers["x-gateway-request-id"])
        return raw.parse()

    billed: list[str] = []
    first = respond(input="What is the weather in Oslo?", instructions="Answer briefly.")
    (call,) = first.output
    assert call.type == "function_call" and call.name == "get_weather"
    output = {"type": "function_call_output", "call_id": call.call_id, "output": '{"sky": "clear"}'}
    second = respond(input=[output], previous_response_id=first.id)  # the simulator answers text
    assert second.previous_response_id == first.id
    assert second.output[0].type == "message" and second.output_text
    third = respond(input="And tomorrow?", previous_response_id=second.id, tool_choice="none")
    assert third.output_text and third.usage is not None

    assert [u.input_tokens for u in (first.usage, second.usage, third.usage)] == sorted(
        u.input_tokens for u in (first.usage, second.usage, third.usage)
    )  # each turn's prompt is the whole conversation so far
    items = list(client.responses.input_items.list(third.id, order="asc", limit=2))  # 3 pages
    assert [i.type for i in items] == [
        "message", "function_call", "function_call_output", "message", "message",
    ]  # fmt: skip
    assert items[1].id == call.id and items[3].id == second.output[0].id
    assert [i.id for i in client.responses.input_items.list(third.id)] == [
        i.id for i in reversed(items)
    ]  # newest first by default
    if not stream:  # the ledger bills the conversation the upstream was sent
        assert ledger_row(folder, billed[2])["input_tokens"] == third.usage.input_tokens

    client.responses.delete(third.id)
    with pytest.raises(openai.NotFoundError):
        client.responses.retrieve(third.id)
    with pytest.raises(openai.NotFoundError):
        client.responses.create(model=MODEL, input="more", previous_response_id=third.id)
    assert client.responses.retrieve(second.id).id == second.id  # its ancestors stay
