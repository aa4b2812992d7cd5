"""The token counter against the real tokenizers: tiktoken offline and a local tokenizer.json."""

from __future__ import annotations

from pathlib import Path

import pytest
import tiktoken

from gateway.tokens import (
    TokenizerConfig,
    TokenizerUnavailable,
    build_token_counter,
    counters_for_models,
    install_packaged_bpe,
    tiktoken_cache_dir,
)
from gateway.wire.request import Operation

SAMPLE_TEXT = Path(tiktoken.__file__).parent.parent.joinpath("pydantic", "main.py").read_text()


@pytest.fixture(scope="module")
def cl100k() -> tiktoken.Encoding:
    build_token_counter(TokenizerConfig())  # installs the packaged BPE file
    return tiktoken.get_encoding("cl100k_base")


def test_packaged_file_lands_under_tiktoken_cache_name(tmp_path: Path) -> None:
    target = install_packaged_bpe("cl100k_base", tmp_path)
    # tiktoken names cached files by the sha1 of their download URL
    assert target.name == "9b5ad71b2ce5302211f9c61530b329a4922fc6a4"
    assert target.read_bytes().startswith(b"IQ== 0\n")
    assert install_packaged_bpe("cl100k_base", tmp_path) == target  # idempotent


def test_cache_dir_is_chosen_like_tiktoken(tmp_path: Path) -> None:
    assert tiktoken_cache_dir({"TIKTOKEN_CACHE_DIR": str(tmp_path)}) == tmp_path
    assert tiktoken_cache_dir({"DATA_GYM_CACHE_DIR": str(tmp_path)}) == tmp_path
    with pytest.raises(TokenizerUnavailable, match="disables"):
        tiktoken_cache_dir({"TIKTOKEN_CACHE_DIR": ""})


@pytest.mark.parametrize("encoding", ["cl100k_base", "o200k_base"])
def test_text_counts_match_tiktoken_exactly(encoding: str) -> None:
    counter = build_token_counter(TokenizerConfig(encoding=encoding))  # type: ignore[arg-type]
    reference = tiktoken.get_encoding(encoding)
    for text in [
        "",
        "hello world",
        "naïve café ☕",
        "<|endoftext|> is text here",
        SAMPLE_TEXT[:9000],
    ]:
        assert counter.count_text(text) == len(reference.encode_ordinary(text))


def test_chat_adds_template_overhead(cl100k: tiktoken.Encoding) -> None:
    counter = build_token_counter(TokenizerConfig())
    messages = [
        {"role": "system", "content": "You are terse."},
        {"role": "user", "name": "ann", "content": "Hello there"},
    ]
    text_tokens = sum(
        len(cl100k.encode_ordinary(t))
        for t in ["system", "You are terse.", "user", "ann", "Hello there"]
    )
    # 3 per message, 1 per name, 3 to prime the reply (OpenAI's documented accounting)
    expected = text_tokens + 2 * 3 + 1 + 3
    assert counter.count_request(Operation.CHAT, {"messages": messages}) == expected


def test_chat_content_parts_and_images(cl100k: tiktoken.Encoding) -> None:
    config = TokenizerConfig(tokens_per_message=0, tokens_per_reply=0, tokens_per_image=100)
    counter = build_token_counter(config)
    content = [
        {"type": "text", "text": "describe"},
        {"type": "image_url", "image_url": {"url": "data:..."}},
    ]
    got = counter.count_request(
        Operation.CHAT, {"messages": [{"role": "user", "content": content}]}
    )
    assert (
        got == len(cl100k.encode_ordinary("user")) + len(cl100k.encode_ordinary("describe")) + 100
    )


def test_completion_and_embedding_prompt_shapes(cl100k: tiktoken.Encoding) -> None:
    counter = build_token_counter(TokenizerConfig())
    n = len(cl100k.encode_ordinary("one two three"))
    assert counter.count_request(Operation.COMPLETION, {"prompt": "one two three"}) == n
    assert counter.count_request(Operation.COMPLETION, {"prompt": ["one two three"] * 2}) == 2 * n
    assert counter.count_request(Operation.COMPLETION, {"prompt": [1, 2, 3, 4]}) == 4
    assert counter.count_request(Operation.EMBEDDING, {"input": [[1, 2], [3]]}) == 3
    assert counter.count_request(Operation.EMBEDDING, {"input": {"odd": True}}) == 0


def test_long_text_is_estimated_within_a_few_percent(cl100k: tiktoken.Encoding) -> None:
    counter = build_token_counter(TokenizerConfig(max_exact_chars=4096))
    text = SAMPLE_TEXT * 3
    exact = len(cl100k.encode_ordinary(text))
    estimate = counter.count_text(text)
    assert abs(estimate - exact) / exact < 0.1


def test_budget_spent_across_many_messages_still_estimates(cl100k: tiktoken.Encoding) -> None:
    counter = build_token_counter(
        TokenizerConfig(max_exact_chars=2048, tokens_per_message=0, tokens_per_reply=0)
    )
    chunk = SAMPLE_TEXT[:1500]
    messages = [{"role": "user", "content": chunk} for _ in range(20)]
    exact = 20 * (len(cl100k.encode_ordinary(chunk)) + len(cl100k.encode_ordinary("user")))
    got = counter.count_request(Operation.CHAT, {"messages": messages})
    assert abs(got - exact) / exact < 0.1


def _train_tokenizer(path: Path) -> Path:
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    specials = ["<s>", "</s>", "<|im_start|>", "<|im_end|>"]
    trainer = trainers.BpeTrainer(vocab_size=600, special_tokens=specials)
    tokenizer.train_from_iterator([SAMPLE_TEXT], trainer)
    out = path / "tokenizer.json"
    tokenizer.save(str(out))
    return out


def test_huggingface_tokenizer_json(tmp_path: Path) -> None:
    from tokenizers import Tokenizer

    path = _train_tokenizer(tmp_path)
    counter = build_token_counter(TokenizerConfig(kind="huggingface", tokenizer_file=path))
    reference = Tokenizer.from_file(str(path))
    text = "def count(text): return len(text)"
    assert counter.count_text(text) == len(reference.encode(text, add_special_tokens=False).ids)


def test_missing_tokenizer_file_is_reported(tmp_path: Path) -> None:
    config = TokenizerConfig(kind="huggingface", tokenizer_file=tmp_path / "nope.json")
    with pytest.raises(TokenizerUnavailable, match=r"nope\.json"):
        build_token_counter(config)


def test_config_is_strict_about_kind_and_file(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="tokenizer_file"):
        TokenizerConfig(kind="huggingface")
    with pytest.raises(ValueError, match="tokenizer_file"):
        TokenizerConfig(tokenizer_file=tmp_path / "t.json")


def test_models_with_the_same_tokenizer_share_one_counter() -> None:
    own = TokenizerConfig(encoding="o200k_base")
    counters = counters_for_models(TokenizerConfig(), [("a", None), ("b", None), ("c", own)])
    assert counters["a"] is counters["b"] and counters["c"] is not counters["a"]


CHATML = (
    "{{ bos_token }}{% for message in messages %}<|im_start|>{{ message['role'] }}\n"
    "{{ message['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


def test_chat_template_beside_the_tokenizer_sets_the_overhead(tmp_path: Path) -> None:
    from jinja2.sandbox import ImmutableSandboxedEnvironment
    from tokenizers import Tokenizer

    path = _train_tokenizer(tmp_path)
    (tmp_path / "chat_template.jinja").write_text(CHATML)
    (tmp_path / "tokenizer_config.json").write_text('{"bos_token": "<s>"}')
    counter = build_token_counter(TokenizerConfig(kind="huggingface", tokenizer_file=path))
    reference = Tokenizer.from_file(str(path))
    template = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True).from_string(
        CHATML
    )
    messages = [
        {"role": "system", "content": "Answer briefly."},
        {"role": "user", "content": "def f(x): return x * 2"},
    ]
    rendered = template.render(messages=messages, add_generation_prompt=True, bos_token="<s>")
    exact = len(reference.encode(rendered, add_special_tokens=False).ids)
    # the template's own tokens, measured once at load: the count is the rendered prompt's
    assert counter.count_request(Operation.CHAT, {"messages": messages}) == exact
    explicit = TokenizerConfig(kind="huggingface", tokenizer_file=path, tokens_per_message=9)
    assert build_token_counter(explicit).config.tokens_per_message == 9  # config wins
