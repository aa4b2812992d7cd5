"""The real openai SDK, sync and async, through a real gateway to a real simulator."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import openai
import pytest

from tests.gatewayproc import GatewayProcess, start_gateway
from tests.integration.proxy.conftest import MODEL, gateway_config
from tests.simproc import SimProcess, start_sim

MESSAGES = [{"role": "user", "content": "Tell me about disaggregated serving"}]


@pytest.fixture
async def aclient(gateway: GatewayProcess) -> AsyncIterator[openai.AsyncOpenAI]:
    async with openai.AsyncOpenAI(base_url=gateway.base_url, api_key="unused", max_retries=0) as c:
        yield c


def test_chat_completion(client: openai.OpenAI, sim: SimProcess) -> None:
    with openai.OpenAI(base_url=sim.base_url, api_key="x", max_retries=0) as direct:
        expected = direct.chat.completions.create(model=MODEL, messages=MESSAGES, max_tokens=6)
    got = client.chat.completions.create(model=MODEL, messages=MESSAGES, max_tokens=6)
    assert got.choices[0].message.content == expected.choices[0].message.content
    assert got.usage is not None and got.usage.completion_tokens == 6
    assert got.usage.prompt_tokens == expected.usage.prompt_tokens  # type: ignore[union-attr]


def test_chat_stream_with_usage(client: openai.OpenAI) -> None:
    chunks = list(
        client.chat.completions.create(
            model=MODEL,
            messages=MESSAGES,
            max_tokens=5,
            stream=True,
            stream_options={"include_usage": True},
        )
    )
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text.strip()
    assert chunks[-1].usage is not None and chunks[-1].usage.completion_tokens == 5
    assert chunks[-1].choices == []


def test_chat_stream_without_usage_has_none(client: openai.OpenAI) -> None:
    chunks = list(
        client.chat.completions.create(model=MODEL, messages=MESSAGES, max_tokens=3, stream=True)
    )
    assert all(c.usage is None for c in chunks)
    assert sum(1 for c in chunks if c.choices and c.choices[0].delta.content) == 3


def test_text_completion_streaming_and_not(client: openai.OpenAI) -> None:
    whole = client.completions.create(model=MODEL, prompt="Once upon a time", max_tokens=4)
    assert whole.usage is not None and whole.usage.completion_tokens == 4
    parts = list(
        client.completions.create(model=MODEL, prompt="Once upon a time", max_tokens=4, stream=True)
    )
    assert "".join(p.choices[0].text for p in parts if p.choices) == whole.choices[0].text


def test_upstream_model_name_is_rewritten(client: openai.OpenAI, sim: SimProcess) -> None:
    got = client.chat.completions.create(model="renamed", messages=MESSAGES, max_tokens=2)
    assert got.choices[0].message.content
    assert sim.requests()[-1]["body"]["model"] == MODEL


def test_embeddings(client: openai.OpenAI) -> None:
    got = client.embeddings.create(model=MODEL, input="hello")
    assert len(got.data[0].embedding) > 0


def test_models_list_and_retrieve(client: openai.OpenAI) -> None:
    assert sorted(m.id for m in client.models.list()) == ["renamed", MODEL]
    assert client.models.retrieve(MODEL).id == MODEL
    with pytest.raises(openai.NotFoundError):
        client.models.retrieve("nope")


async def test_async_client_chat_and_stream(aclient: openai.AsyncOpenAI) -> None:
    got = await aclient.chat.completions.create(model=MODEL, messages=MESSAGES, max_tokens=3)
    assert got.usage is not None and got.usage.completion_tokens == 3
    stream = await aclient.chat.completions.create(
        model=MODEL, messages=MESSAGES, max_tokens=3, stream=True
    )
    pieces = [c.choices[0].delta.content async for c in stream if c.choices]
    assert "".join(p or "" for p in pieces).strip()
    models = [m.id async for m in aclient.models.list()]
    assert MODEL in models


def test_unknown_model_is_not_found(client: openai.OpenAI) -> None:
    with pytest.raises(openai.NotFoundError) as err:
        client.chat.completions.create(model="gpt-nope", messages=MESSAGES)
    assert err.value.code == "model_not_found"


def test_bad_parameters_are_bad_requests(client: openai.OpenAI) -> None:
    with pytest.raises(openai.BadRequestError) as err:
        client.chat.completions.create(model=MODEL, messages=MESSAGES, max_tokens=-1)
    assert err.value.param == "max_tokens"
    with pytest.raises(openai.BadRequestError) as err:
        client.chat.completions.create(model=MODEL, messages=[])
    assert err.value.param == "messages"


def test_upstream_400_passes_through(client: openai.OpenAI) -> None:
    long_prompt = [{"role": "user", "content": "word " * 600}]
    with pytest.raises(openai.BadRequestError):
        client.chat.completions.create(model=MODEL, messages=long_prompt, max_tokens=10)


def test_upstream_5xx_passes_through_with_its_status(client: openai.OpenAI) -> None:
    with pytest.raises(openai.APIStatusError) as err:
        client.chat.completions.create(
            model=MODEL, messages=MESSAGES, extra_headers={"x-sim-status": "503"}
        )
    assert err.value.status_code == 503


def test_timeout_is_504(client: openai.OpenAI) -> None:
    with pytest.raises(openai.APIStatusError) as err:
        client.chat.completions.create(
            model=MODEL, messages=MESSAGES, extra_headers={"x-sim-hang": "1"}
        )
    assert err.value.status_code == 504
    assert err.value.code == "timeout"


def test_upstream_down_is_502_then_503(tmp_path: Path) -> None:
    with start_sim("--model", MODEL, "--no-delay") as sim:
        config = gateway_config(sim.url, health={"interval": 30})
        with start_gateway(config, tmp_path) as gateway:
            sim.stop()
            statuses = []
            with openai.OpenAI(base_url=gateway.base_url, api_key="x", max_retries=0) as client:
                for _ in range(2):
                    with pytest.raises(openai.APIStatusError) as err:
                        client.chat.completions.create(model=MODEL, messages=MESSAGES)
                    statuses.append(err.value.status_code)
            # The first request finds the replica refusing connections (502) and takes it out
            # of rotation; the next one finds no healthy replica at all (503).
            assert statuses == [502, 503]
