"""Usage from the upstream, or counted for a cut stream; the usage chunk asked for and stripped."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest
from tokenizers import Tokenizer, models, pre_tokenizers, trainers

from gateway.accounting.tokens import TokenCounter, TokenizerConfig, build_token_counter
from gateway.accounting.usage import (
    Usage,
    client_wants_usage,
    measured_usage,
    usage_requested,
)
from gateway.proxy.parse import Operation
from gateway.proxy.sse import StreamMeter

CORPUS = Path(orjson.__file__).parent.parent.joinpath("pydantic", "main.py").read_text()


@pytest.fixture(scope="module")
def tokenizer_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A small byte-level BPE like the local tiny model's, trained here (no download)."""
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    trainer = trainers.BpeTrainer(vocab_size=800, special_tokens=["<s>", "</s>"])
    tokenizer.train_from_iterator([CORPUS], trainer)
    path = tmp_path_factory.mktemp("tok") / "tokenizer.json"
    tokenizer.save(str(path))
    return path


@pytest.fixture(scope="module")
def counter(tokenizer_file: Path) -> TokenCounter:
    config = TokenizerConfig(
        kind="huggingface", tokenizer_file=tokenizer_file, max_exact_chars=200_000
    )
    return build_token_counter(config)


def chunk(content: str | None = None, *, usage: dict[str, object] | None = None) -> bytes:
    event: dict[str, object] = {"id": "c1", "model": "m", "object": "chat.completion.chunk"}
    event["choices"] = [] if content is None else [{"index": 0, "delta": {"content": content}}]
    if usage is not None:
        event["usage"] = usage
    return b"data: " + orjson.dumps(event) + b"\n\n"


def test_usage_is_requested_without_losing_the_clients_options() -> None:
    payload = {"model": "m", "stream": True, "stream_options": {"continuous_usage_stats": False}}
    assert not client_wants_usage(payload)
    asked = usage_requested(payload)
    assert asked["stream_options"] == {"continuous_usage_stats": False, "include_usage": True}
    assert client_wants_usage(asked) and "stream_options" in usage_requested({"model": "m"})


def test_upstream_usage_is_the_truth_and_its_chunk_is_stripped() -> None:
    meter = StreamMeter(strip_usage=True)
    usage = {
        "prompt_tokens": 7,
        "completion_tokens": 2,
        "total_tokens": 9,
        "prompt_tokens_details": {"cached_tokens": 4},
    }
    stream = chunk("Hel") + chunk("lo") + chunk(usage=usage) + b"data: [DONE]\n\n"
    # Split mid-event, as a network would.
    forwarded = meter.feed(stream[:50]) + meter.feed(stream[50:]) + meter.flush()
    assert b'"usage"' not in forwarded and forwarded.endswith(b"data: [DONE]\n\n")
    assert forwarded.count(b"data: ") == 3
    assert measured_usage(meter, lambda: 999, None) == Usage(7, 2, 4, partial=False)


def test_the_client_that_asked_keeps_the_usage_chunk() -> None:
    meter = StreamMeter(strip_usage=False)
    stream = chunk("a") + chunk(usage={"prompt_tokens": 1, "completion_tokens": 1})
    assert meter.feed(stream) == stream


def test_cut_stream_counts_delivered_output_exactly(counter: TokenCounter) -> None:
    reference = Tokenizer.from_file(str(counter.config.tokenizer_file))
    text = CORPUS[:12_000]
    meter = StreamMeter()
    pieces = [text[i : i + 5] for i in range(0, len(text), 5)]
    for piece in pieces:
        meter.feed(chunk(piece))
    used = measured_usage(meter, prompt_tokens=lambda: 321, counter=counter)
    exact = len(reference.encode(text, add_special_tokens=False).ids)
    assert exact > 2000  # "a few thousand tokens"
    assert used == Usage(321, exact, 0, partial=True)


def test_long_chat_prompt_counted_exactly_with_the_template(counter: TokenCounter) -> None:
    reference = Tokenizer.from_file(str(counter.config.tokenizer_file))
    system, user = CORPUS[:3000], CORPUS[3000:15_000]
    messages = [{"role": "system", "content": system}, {"role": "user", "content": user}]
    cfg = counter.config

    def n(text: str) -> int:
        return len(reference.encode(text, add_special_tokens=False).ids)

    exact = (
        cfg.tokens_per_reply
        + 2 * cfg.tokens_per_message
        + n("system") + n(system) + n("user") + n(user)
    )  # fmt: skip
    assert exact > 3000
    assert counter.count_request(Operation.CHAT, {"messages": messages}) == exact


def test_failure_before_output_uses_nothing() -> None:
    meter = StreamMeter()
    meter.feed(b'data: {"id":"c1","choices":[{"index":0,"delta":{"role":"assistant"}}]}\n\n')
    assert measured_usage(meter, lambda: 50, None).total == 0
    assert measured_usage(None, lambda: 50, None) == Usage(0, 0, 0, partial=False)
