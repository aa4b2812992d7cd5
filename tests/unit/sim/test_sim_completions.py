"""The simulator speaks vLLM's OpenAI wire format: checked with the real openai SDK and httpx."""

from __future__ import annotations

import httpx
import openai
import orjson
import pytest

from serve_app.sim import text
from tests.simproc import SimProcess
from tests.unit.sim.sim_args import MAX_MODEL_LEN, MODELS

MESSAGES = [
    {"role": "system", "content": "You are terse."},
    {"role": "user", "content": "Name three rivers in Europe"},
]
# 3 + 5 words, 4 tokens of overhead per message, 2 to open the reply.
MESSAGES_TOKENS = 3 + 5 + 2 * text.MESSAGE_OVERHEAD_TOKENS + text.REPLY_PRIMING_TOKENS


def client(sim: SimProcess) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=sim.base_url, api_key="sim", max_retries=0)


def sse_events(raw: bytes) -> list[bytes]:
    """Split an SSE body, insisting on the exact ``data: ...\\n\\n`` framing."""
    assert raw.endswith(b"data: [DONE]\n\n")
    events = raw.split(b"\n\n")
    assert events[-1] == b""
    assert all(e.startswith(b"data: ") for e in events[:-1])
    return [e[len(b"data: ") :] for e in events[:-1]]


async def test_chat_non_streaming(fast_sim: SimProcess) -> None:
    async with client(fast_sim) as c:
        r = await c.chat.completions.create(model=MODELS[0], messages=MESSAGES, max_tokens=5)
    assert r.object == "chat.completion"
    assert r.model == MODELS[0]
    assert r.id.startswith("chatcmpl-")
    choice = r.choices[0]
    assert choice.message.role == "assistant"
    assert choice.finish_reason == "length"
    assert choice.message.content == text.output_text(text.prompt_seed(_joined(MESSAGES)), 5)
    assert len(choice.message.content.split()) == 5
    assert r.usage is not None
    assert (r.usage.prompt_tokens, r.usage.completion_tokens) == (MESSAGES_TOKENS, 5)
    assert r.usage.total_tokens == MESSAGES_TOKENS + 5


def _joined(messages: list[dict[str, str]]) -> str:
    return "\n".join(m["content"] for m in messages)


async def test_chat_streaming_one_token_per_chunk(fast_sim: SimProcess) -> None:
    async with client(fast_sim) as c:
        stream = await c.chat.completions.create(
            model=MODELS[1], messages=MESSAGES, max_tokens=4, stream=True
        )
        chunks = [chunk async for chunk in stream]
    assert chunks[0].choices[0].delta.role == "assistant"
    assert chunks[0].choices[0].delta.content == ""
    tokens = [ch.choices[0].delta.content for ch in chunks[1:]]
    assert len(tokens) == 4
    assert all(ch.object == "chat.completion.chunk" and ch.model == MODELS[1] for ch in chunks)
    assert len({ch.id for ch in chunks}) == 1
    assert [ch.choices[0].finish_reason for ch in chunks[1:]] == [None, None, None, "length"]
    assert all(ch.usage is None for ch in chunks)
    # Same prompt, same words, streamed or not.
    async with client(fast_sim) as c:
        whole = await c.chat.completions.create(model=MODELS[1], messages=MESSAGES, max_tokens=4)
    assert "".join(t or "" for t in tokens) == whole.choices[0].message.content


async def test_chat_stream_include_usage_ends_with_usage_chunk(fast_sim: SimProcess) -> None:
    async with client(fast_sim) as c:
        stream = await c.chat.completions.create(
            model=MODELS[0],
            messages=MESSAGES,
            max_tokens=3,
            stream=True,
            stream_options={"include_usage": True},
        )
        chunks = [chunk async for chunk in stream]
    last = chunks[-1]
    assert last.choices == []
    assert last.usage is not None
    assert (last.usage.prompt_tokens, last.usage.completion_tokens) == (MESSAGES_TOKENS, 3)
    assert last.usage.total_tokens == MESSAGES_TOKENS + 3
    assert len(chunks) == 1 + 3 + 1


async def test_stream_wire_framing_and_headers(fast_sim: SimProcess) -> None:
    body = {"messages": MESSAGES, "max_tokens": 2, "stream": True}
    body["stream_options"] = {"include_usage": True}
    async with httpx.AsyncClient() as h:
        r = await h.post(fast_sim.base_url + "/chat/completions", json=body)
    assert r.status_code == 200
    assert r.headers["content-type"] == "text/event-stream"
    events = [orjson.loads(e) for e in sse_events(r.content)[:-1]]
    assert [len(e["choices"]) for e in events] == [1, 1, 1, 0]
    assert events[-1]["usage"]["completion_tokens"] == 2
    # No model named: vLLM serves its first model.
    assert {e["model"] for e in events} == {MODELS[0]}


async def test_text_completion_non_streaming_and_streaming(fast_sim: SimProcess) -> None:
    prompt = "Once upon a time in a small town"
    async with client(fast_sim) as c:
        r = await c.completions.create(model=MODELS[0], prompt=prompt)
        stream = await c.completions.create(
            model=MODELS[0],
            prompt=prompt,
            stream=True,
            stream_options={"include_usage": True},
        )
        chunks = [chunk async for chunk in stream]
    assert r.object == "text_completion"
    assert r.id.startswith("cmpl-")
    # max_tokens not given: the answer's own length, the simulator's --output-tokens (8 here),
    # ended by a natural stop.
    assert r.choices[0].finish_reason == "stop"
    assert r.usage is not None
    assert (r.usage.prompt_tokens, r.usage.completion_tokens) == (8, 8)
    assert r.choices[0].text == text.output_text(text.prompt_seed(prompt), 8)
    assert all(ch.object == "text_completion" for ch in chunks)
    assert "".join(ch.choices[0].text for ch in chunks[:-1]) == r.choices[0].text
    assert chunks[-1].choices == []
    assert chunks[-1].usage is not None
    assert chunks[-1].usage.total_tokens == 16


async def test_non_streaming_content_type_is_json(fast_sim: SimProcess) -> None:
    async with httpx.AsyncClient() as h:
        r = await h.post(fast_sim.base_url + "/completions", json={"prompt": "hi"})
    assert r.headers["content-type"] == "application/json"
    assert r.json()["usage"] == {"prompt_tokens": 1, "completion_tokens": 8, "total_tokens": 9}


async def test_models_list_is_vllm_like(fast_sim: SimProcess) -> None:
    async with client(fast_sim) as c:
        page = await c.models.list()
    assert [m.id for m in page.data] == list(MODELS)
    async with httpx.AsyncClient() as h:
        raw = (await h.get(fast_sim.base_url + "/models")).json()
    assert raw["object"] == "list"
    card = raw["data"][0]
    assert card["object"] == "model"
    assert card["owned_by"] == "vllm"
    assert card["root"] == MODELS[0]
    assert card["max_model_len"] == MAX_MODEL_LEN


async def test_embeddings_are_deterministic_unit_vectors(fast_sim: SimProcess) -> None:
    async with client(fast_sim) as c:
        first = await c.embeddings.create(model=MODELS[0], input=["alpha beta", "gamma"])
        again = await c.embeddings.create(model=MODELS[0], input="alpha beta")
    a, b = first.data[0].embedding, first.data[1].embedding
    assert a == again.data[0].embedding
    assert a != b
    assert abs(sum(v * v for v in a) - 1.0) < 1e-9
    assert first.usage.prompt_tokens == 3


async def test_health_is_200_and_empty(fast_sim: SimProcess) -> None:
    async with httpx.AsyncClient() as h:
        r = await h.get(fast_sim.url + "/health")
    assert (r.status_code, r.content) == (200, b"")


async def test_prompt_plus_max_tokens_over_context_is_400(fast_sim: SimProcess) -> None:
    long_prompt = " ".join(["word"] * (MAX_MODEL_LEN - 10))
    async with client(fast_sim) as c:
        # Fits: 246 prompt tokens + 10.
        ok = await c.completions.create(
            model=MODELS[0], prompt=long_prompt, max_tokens=10, extra_body={"ignore_eos": True}
        )
        assert ok.usage is not None and ok.usage.total_tokens == MAX_MODEL_LEN
        with pytest.raises(openai.BadRequestError) as info:
            await c.completions.create(model=MODELS[0], prompt=long_prompt, max_tokens=11)
    error = info.value.body
    assert isinstance(error, dict)
    assert error["type"] == "BadRequestError"
    assert error["code"] == 400
    assert "maximum context length is 256 tokens" in error["message"]
    assert "param" in error


async def test_an_answer_stops_by_itself_unless_the_cap_cuts_it(fast_sim: SimProcess) -> None:
    """As an engine: ``stop`` when the answer (8 tokens here) fits the cap, ``length`` only when
    the cap cuts it or vLLM's ``ignore_eos`` asks for the whole cap; ``n`` choices."""
    async with client(fast_sim) as c:
        fits = await c.chat.completions.create(model=MODELS[0], messages=MESSAGES, max_tokens=20)
        cut = await c.chat.completions.create(model=MODELS[0], messages=MESSAGES, max_tokens=3)
        whole = await c.chat.completions.create(
            model=MODELS[0], messages=MESSAGES, max_tokens=20, extra_body={"ignore_eos": True}
        )
        several = await c.chat.completions.create(
            model=MODELS[0], messages=MESSAGES, max_tokens=20, n=3
        )
    assert fits.choices[0].finish_reason == "stop" and fits.usage is not None
    assert fits.usage.completion_tokens == 8 and fits.choices[0].message.refusal is None
    assert cut.choices[0].finish_reason == "length" and cut.usage is not None
    assert cut.usage.completion_tokens == 3
    assert whole.choices[0].finish_reason == "length" and whole.usage is not None
    assert whole.usage.completion_tokens == 20
    assert [ch.index for ch in several.choices] == [0, 1, 2] and several.usage is not None
    assert several.usage.completion_tokens == 24
    assert len({ch.message.content for ch in several.choices}) == 3


async def test_unknown_model_is_404(fast_sim: SimProcess) -> None:
    async with client(fast_sim) as c:
        with pytest.raises(openai.NotFoundError) as info:
            await c.chat.completions.create(model="nope", messages=MESSAGES)
    assert info.value.status_code == 404
    assert isinstance(info.value.body, dict)
    assert info.value.body["type"] == "NotFoundError"


async def test_invalid_json_is_400_with_vllm_error_shape(fast_sim: SimProcess) -> None:
    async with httpx.AsyncClient() as h:
        r = await h.post(fast_sim.base_url + "/chat/completions", content=b"{not json")
    assert r.status_code == 400
    assert r.headers["content-type"] == "application/json"
    error = r.json()["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert (error["type"], error["code"]) == ("BadRequestError", 400)


async def test_unknown_path_and_wrong_method(fast_sim: SimProcess) -> None:
    async with httpx.AsyncClient() as h:
        missing = await h.get(fast_sim.url + "/v1/nothing")
        wrong = await h.get(fast_sim.base_url + "/chat/completions")
    assert missing.status_code == 404
    assert wrong.status_code == 405


async def test_x_sim_status_answers_that_status(fast_sim: SimProcess) -> None:
    async with client(fast_sim) as c:
        with pytest.raises(openai.InternalServerError) as info:
            await c.chat.completions.create(
                model=MODELS[0], messages=MESSAGES, extra_headers={"x-sim-status": "503"}
            )
    assert info.value.status_code == 503
    assert isinstance(info.value.body, dict)
    assert info.value.body["code"] == 503
    [record] = fast_sim.requests()
    assert record["status"] == 503


async def test_records_describe_each_request(fast_sim: SimProcess) -> None:
    async with client(fast_sim) as c:
        await c.chat.completions.create(
            model=MODELS[0],
            messages=MESSAGES,
            max_tokens=2,
            stream=True,
            extra_headers={"x-request-id": "req-123"},
        )
        await c.completions.create(model=MODELS[1], prompt="hello", max_tokens=1)
    first, second = fast_sim.wait_for_requests(2, done=True)
    assert (first["seq"], second["seq"]) == (first["seq"], first["seq"] + 1)
    assert first["request_id"] == "req-123"
    assert first["path"] == "/v1/chat/completions"
    assert (first["model"], first["stream"]) == (MODELS[0], True)
    assert first["body"]["messages"] == MESSAGES
    assert first["headers"]["x-request-id"] == "req-123"
    assert first["received_at"] <= first["first_token_at"] <= first["completed_at"]
    assert (first["cancelled"], first["cancelled_at"], first["chunks_sent"]) == (False, None, 2)
    assert (second["request_id"], second["model"], second["stream"]) == (None, MODELS[1], False)
    fast_sim.reset()
    assert fast_sim.requests() == []
