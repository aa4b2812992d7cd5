"""Usage from the upstream, or counted for a cut stream; the usage chunk asked for and stripped."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import orjson
import pytest
from tokenizers import Tokenizer, models, pre_tokenizers, trainers

from gateway.tokens import TokenCounter, TokenizerConfig, build_token_counter
from gateway.wire.meter import StreamMeter
from gateway.wire.request import Operation
from gateway.wire.usage import (
    Usage,
    UsageSource,
    client_wants_usage,
    settle_usage,
    usage_requested,
)

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
    assert settled(meter, reached=True) == Usage(7, 2, 4, UsageSource.UPSTREAM)


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
    used = settled(meter, reached=True, prompt=321, count_text=counter.count_text)
    exact = len(reference.encode(text, add_special_tokens=False).ids)
    assert exact > 2000  # "a few thousand tokens"
    assert used == Usage(321, exact, 0, UsageSource.COUNTED, partial=True)


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


def test_a_request_that_never_reached_the_upstream_uses_nothing() -> None:
    meter = StreamMeter()
    assert settled(meter, reached=False) == Usage(0, 0, 0, UsageSource.NONE)


def test_reaching_the_upstream_charges_the_counted_prompt_at_least() -> None:
    """A client that leaves right after prefill (the first chunk, no content yet) still pays
    its prompt: leaving early is never free."""
    meter = StreamMeter()
    meter.feed(b'data: {"id":"c1","choices":[{"index":0,"delta":{"role":"assistant"}}]}\n\n')
    assert settled(meter, reached=True, prompt=50) == Usage(
        50, 0, 0, UsageSource.COUNTED, partial=True
    )


def settled(
    meter: StreamMeter,
    *,
    reached: bool,
    prompt: int = 999,
    count_text: Callable[[str], int] | None = None,
) -> Usage:
    delivered = meter.delivered(
        status=200, upstream_status=200, first_byte_at=None, error_code=None
    )
    return settle_usage(
        reported=delivered.upstream_usage,
        reached=reached,
        complete=False,
        prompt_tokens=lambda: prompt,
        output_text=delivered.output_text,
        content_events=delivered.content_events,
        count_text=count_text,
    )
