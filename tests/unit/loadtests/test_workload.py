"""Workload generation: exact prompt lengths with real tokenizers, distributions, datasets."""

from __future__ import annotations

import random
from pathlib import Path
from statistics import median

import pytest

from loadtests.pdload.arrivals import arrival_offsets
from loadtests.pdload.tokenizer import TokenizerError, load_tokenizer
from loadtests.pdload.workload import WorkloadError, WorkloadSpec, build_items, fit_prompt


@pytest.mark.parametrize("name", ["words", "cl100k_base", "o200k_base"])
@pytest.mark.parametrize("n", [1, 7, 128, 1000])
def test_prompts_have_exact_token_counts(name: str, n: int) -> None:
    tok = load_tokenizer(name)
    text, got = fit_prompt(tok, n, random.Random(n))
    assert got == n == len(tok.encode(text))


def test_huggingface_tokenizer_json(tmp_path: Path) -> None:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    hf = Tokenizer(models.BPE(unk_token="[UNK]"))
    hf.pre_tokenizer = pre_tokenizers.ByteLevel()
    hf.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=300, special_tokens=["[UNK]"])
    hf.train_from_iterator(["the quick brown fox jumps over the lazy dog"] * 50, trainer)
    hf.save(str(tmp_path / "tokenizer.json"))
    tok = load_tokenizer(str(tmp_path))
    items = build_items(WorkloadSpec(input_tokens=50), tok, 5, seed=1, salt=0)
    assert [i.prompt_tokens for i in items] == [50] * 5
    assert all(len(tok.encode(i.prompt)) == 50 for i in items)


def test_unknown_tokenizer_is_a_clear_error() -> None:
    with pytest.raises(TokenizerError, match=r"tokenizer\.json"):
        load_tokenizer("/nowhere/tokenizer.json")


def test_same_lengths_for_every_salt_different_text() -> None:
    spec = WorkloadSpec(kind="lognormal", input_tokens=100, output_tokens=50)
    tok = load_tokenizer("words")
    a = build_items(spec, tok, 50, seed=3, salt=0)
    b = build_items(spec, tok, 50, seed=3, salt=1)
    assert [(i.prompt_tokens, i.max_tokens) for i in a] == [
        (i.prompt_tokens, i.max_tokens) for i in b
    ]
    assert all(x.prompt != y.prompt for x, y in zip(a, b, strict=True))


def test_lognormal_has_the_median_asked_and_respects_bounds() -> None:
    spec = WorkloadSpec(kind="lognormal", input_tokens=200, output_tokens=40, max_input_tokens=600)
    items = build_items(spec, load_tokenizer("words"), 2000, seed=1, salt=0)
    assert 180 <= median(i.prompt_tokens for i in items) <= 220
    assert 36 <= median(i.max_tokens for i in items) <= 44
    assert max(i.prompt_tokens for i in items) == 600  # the tail is clipped
    assert min(i.prompt_tokens for i in items) >= 1


def test_mix_has_the_long_fraction_asked() -> None:
    spec = WorkloadSpec(kind="mix", short_tokens=20, long_tokens=300, long_fraction=0.3)
    items = build_items(spec, load_tokenizer("words"), 1000, seed=1, salt=0)
    longs = [i for i in items if i.shape == "long"]
    assert 250 <= len(longs) <= 350
    assert {i.prompt_tokens for i in longs} == {300}
    assert {i.prompt_tokens for i in items if i.shape == "short"} == {20}


def test_shared_prefix_groups_share_their_prefix_only() -> None:
    spec = WorkloadSpec(kind="shared-prefix", input_tokens=10, prefix_tokens=40, prefix_groups=3)
    items = build_items(spec, load_tokenizer("words"), 9, seed=1, salt=0)
    prefix = [i.prompt.split()[:40] for i in items]
    assert prefix[0] == prefix[3] == prefix[6] != prefix[1]
    assert items[0].prompt != items[3].prompt
    assert {i.prompt_tokens for i in items} == {50}


def test_dataset_lines(tmp_path: Path) -> None:
    path = tmp_path / "d.jsonl"
    path.write_text(
        '{"prompt": "one two three", "max_tokens": 5}\n\n'
        '{"messages": [{"role": "user", "content": "a b"}]}\n'
    )
    spec = WorkloadSpec(kind="dataset", dataset=path, output_tokens=9)
    items = build_items(spec, load_tokenizer("words"), 10, seed=1, salt=0)
    assert [(i.prompt_tokens, i.max_tokens, i.messages is None) for i in items] == [
        (3, 5, True),
        (2, 9, False),
    ]


@pytest.mark.parametrize(
    ("content", "error"),
    [
        ("nope\n", "not JSON"),
        ('{"x": 1}\n', "needs a 'prompt'"),
        ('{"prompt": "a", "max_tokens": 0}\n', "max_tokens"),
        ("", "no prompts"),
    ],
)
def test_bad_datasets_are_refused(tmp_path: Path, content: str, error: str) -> None:
    path = tmp_path / "d.jsonl"
    path.write_text(content)
    with pytest.raises(WorkloadError, match=error):
        build_items(WorkloadSpec(kind="dataset", dataset=path), load_tokenizer("words"), 1, 1, 0)


def test_constant_arrivals_are_evenly_spaced() -> None:
    offsets = arrival_offsets("constant", 4.0, seed=1)
    assert [next(offsets) for _ in range(4)] == [0.0, 0.25, 0.5, 0.75]


def test_poisson_arrivals_have_the_mean_rate_and_repeat_by_seed() -> None:
    a = arrival_offsets("poisson", 50.0, seed=7)
    times = [next(a) for _ in range(5001)]
    assert times[-1] / 5000 == pytest.approx(1 / 50, rel=0.05)
    b = arrival_offsets("poisson", 50.0, seed=7)
    assert [next(b) for _ in range(10)] == times[:10]
    with pytest.raises(ValueError, match="positive"):
        next(arrival_offsets("poisson", 0, seed=1))
