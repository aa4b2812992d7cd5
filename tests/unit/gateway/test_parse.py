import json

import orjson
import pytest

from gateway.errors import BodyTooLarge, InvalidJSON, InvalidParameter, UnsupportedMediaType
from gateway.wire.request import BodyShape, Operation, parse_request, read_body


def body(**fields: object) -> bytes:
    return orjson.dumps(fields)


CHAT = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}


def test_chat_request_parsed_and_unknown_fields_kept() -> None:
    raw = body(**CHAT, stream=True, max_tokens=5, logit_bias={"1": 2}, custom="x")
    req = parse_request(Operation.CHAT, raw, 100)
    assert (req.model, req.stream, req.max_tokens) == ("m", True, 5)
    assert req.payload["custom"] == "x"
    # A stream whose client did not ask for usage asks for it upstream (stripped on the way back)
    assert req.strip_usage and req.payload["stream_options"] == {"include_usage": True}
    raw_whole = body(**CHAT, max_tokens=5)
    whole = parse_request(Operation.CHAT, raw_whole, 100)
    assert whole.body is raw_whole and not whole.strip_usage  # passed through untouched


def test_shape_limits_come_before_any_expensive_work() -> None:
    shape = BodyShape(max_containers=50, max_items=3, max_model_chars=8)
    flood = orjson.dumps({**CHAT, "junk": [{}] * 60})
    with pytest.raises(InvalidParameter, match="more than 50 JSON objects"):
        parse_request(Operation.CHAT, flood, 100, shape)
    many = orjson.dumps({"model": "m", "prompt": [""] * 4})
    with pytest.raises(InvalidParameter, match=r"`prompt` has 4 entries"):
        parse_request(Operation.COMPLETION, many, 100, shape)
    with pytest.raises(InvalidParameter, match="longer than 8"):
        parse_request(Operation.CHAT, orjson.dumps({**CHAT, "model": "m" * 9}), 100, shape)
    assert parse_request(
        Operation.COMPLETION, orjson.dumps({"model": "m", "prompt": [""] * 3}), 100, shape
    )


def test_integral_floats_are_integers_as_json_schema_says() -> None:
    req = parse_request(Operation.CHAT, body(**CHAT, max_tokens=7.0, n=2.0), 100)
    assert (req.max_tokens, req.choices) == (7, 2)


def test_reservation_inputs_follow_vllm() -> None:
    req = parse_request(Operation.CHAT, body(**CHAT, max_tokens=500, max_completion_tokens=7), 1000)
    assert req.max_tokens == 7  # vLLM caps the output with max_completion_tokens when given
    req = parse_request(Operation.COMPLETION, body(model="m", prompt="p", n=2, best_of=5), 1000)
    assert req.choices == 5


def test_a_body_too_deep_to_forward_is_a_400_before_anything_is_reserved() -> None:
    deep: object = "x"
    for _ in range(300):
        deep = [deep]
    with pytest.raises(InvalidJSON, match="cannot be forwarded"):
        # orjson reads 300 levels but writes at most 254: built with the standard library here
        raw = json.dumps({**CHAT, "stream": True, "deep": deep}).encode()
        parse_request(Operation.CHAT, raw, 100)


@pytest.mark.parametrize(
    ("raw", "error", "param"),
    [
        (b"{not json", InvalidJSON, None),
        (b"[1, 2]", InvalidJSON, None),
        (body(messages=[]), InvalidParameter, "model"),
        (body(model="", messages=[{"role": "user", "content": "x"}]), InvalidParameter, "model"),
        (body(model="m"), InvalidParameter, "messages"),
        (body(model="m", messages=[]), InvalidParameter, "messages"),
        (body(**CHAT, stream="yes"), InvalidParameter, "stream"),
        (body(**CHAT, max_tokens=0), InvalidParameter, "max_tokens"),
        (body(**CHAT, max_tokens=-3), InvalidParameter, "max_tokens"),
        (body(**CHAT, max_tokens=1.5), InvalidParameter, "max_tokens"),
        (body(**CHAT, max_tokens=True), InvalidParameter, "max_tokens"),
        (body(**CHAT, max_tokens=10**12), InvalidParameter, "max_tokens"),
        (body(**CHAT, max_completion_tokens=10**12), InvalidParameter, "max_completion_tokens"),
    ],
)
def test_bad_chat_requests(raw: bytes, error: type[Exception], param: str | None) -> None:
    with pytest.raises(error) as caught:
        parse_request(Operation.CHAT, raw, 1000)
    assert getattr(caught.value, "param", None) == param
    assert getattr(caught.value, "status", None) == 400


def test_completion_needs_prompt_and_embeddings_cannot_stream() -> None:
    with pytest.raises(InvalidParameter, match="prompt"):
        parse_request(Operation.COMPLETION, body(model="m"), 10)
    with pytest.raises(InvalidParameter, match="streamed"):
        parse_request(Operation.EMBEDDING, body(model="m", input="x", stream=True), 10)


def _receiver(*chunks: bytes):  # type: ignore[no-untyped-def]
    messages = [
        {"type": "http.request", "body": c, "more_body": i < len(chunks) - 1}
        for i, c in enumerate(chunks)
    ]

    async def receive():  # type: ignore[no-untyped-def]
        return messages.pop(0)

    return receive


def _scope(**headers: str) -> dict[str, object]:
    return {"headers": [(k.replace("_", "-").encode(), v.encode()) for k, v in headers.items()]}


async def test_read_body_joins_chunks() -> None:
    got = await read_body(_scope(content_type="application/json"), _receiver(b"ab", b"cd"), 10)
    assert got == b"abcd"


async def test_read_body_refuses_over_limit_while_streaming_in() -> None:
    with pytest.raises(BodyTooLarge):
        await read_body(_scope(), _receiver(b"x" * 6, b"x" * 6), 10)


async def test_read_body_refuses_declared_length_over_limit_before_reading() -> None:
    async def never():  # type: ignore[no-untyped-def]
        raise AssertionError("must not read")

    with pytest.raises(BodyTooLarge):
        await read_body(_scope(content_length="11"), never, 10)


async def test_read_body_refuses_wrong_content_type() -> None:
    with pytest.raises(UnsupportedMediaType):
        await read_body(_scope(content_type="text/plain"), _receiver(b"{}"), 10)
