"""Workloads: the prompts and output lengths of a run, built with the target's tokenizer.

Lengths come from a generator seeded by the run's seed alone, so every target and every step
sees the same length distribution; the text is salted per target and step, so a step never
re-sends an earlier step's prompt (a prefix-cache hit would flatter TTFT)::

    spec = WorkloadSpec(kind="mix", short_tokens=32, long_tokens=256, long_fraction=0.5)
    items = build_items(spec, load_tokenizer("words"), count=100, seed=1, salt=0)
    items[0].prompt_tokens, items[0].max_tokens, items[0].shape
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import orjson

from loadtests.pdload.corpus import words
from loadtests.pdload.tokenizer import Tokenizer

WorkloadKind = Literal["fixed", "lognormal", "mix", "shared-prefix", "multi-turn", "dataset"]
MAX_DATASET_LINES = 100_000
MAX_DATASET_LINE_BYTES = 1 << 20
_FIT_ATTEMPTS = 6


class WorkloadError(Exception):
    """A workload that cannot be built (bad dataset file, impossible lengths)."""


@dataclass(frozen=True, slots=True)
class WorkloadSpec:
    """What to send. Token counts are prompt text tokens (the chat template adds its own)."""

    kind: WorkloadKind = "fixed"
    input_tokens: int = 128
    output_tokens: int = 64
    input_sigma: float = 0.8
    output_sigma: float = 0.6
    max_input_tokens: int = 8192
    max_output_tokens: int = 4096
    short_tokens: int = 32
    long_tokens: int = 512
    long_fraction: float = 0.5
    prefix_tokens: int = 256
    prefix_groups: int = 4
    conversations: int = 8
    """multi-turn: conversations in progress at once (their turns interleave)."""
    turns: int = 4
    dataset: Path | None = None


@dataclass(frozen=True, slots=True)
class WorkItem:
    """One request's content: a prompt (or chat messages from a dataset) and its lengths."""

    prompt: str
    prompt_tokens: int
    max_tokens: int
    shape: str
    messages: tuple[dict[str, Any], ...] | None = None


def fit_prompt(tokenizer: Tokenizer, n: int, rng: random.Random) -> tuple[str, int]:
    """Text of ``n`` tokens of ``tokenizer`` (exactly, unless its merges make that impossible).

    Decoding a slice of token ids and encoding it again can merge across the cut, so the slice
    is resized by the difference and tried again; the closest result wins.
    """
    if n <= 0:
        return "", 0
    source = tokenizer.encode(words(n + 16, rng))
    while len(source) < n + 16:
        source += tokenizer.encode(" " + words(n, rng))
    best = ("", -1)
    # A different cut point changes the merges at the ends; a few are tried before settling.
    for start in range(4):
        take = n
        for _ in range(_FIT_ATTEMPTS):
            text = tokenizer.decode(source[start : start + max(take, 1)]).strip()
            got = len(tokenizer.encode(text))
            if abs(got - n) < abs(best[1] - n):
                best = (text, got)
            if got == n:
                return best
            take = min(max(take + n - got, 1), len(source) - start)
    return best


def _lognormal(rng: random.Random, median: int, sigma: float, upper: int) -> int:
    return max(1, min(upper, round(rng.lognormvariate(math.log(max(median, 1)), sigma))))


def _lengths(spec: WorkloadSpec, rng: random.Random, i: int) -> tuple[int, int, str]:
    """(prompt tokens, output tokens, shape label) of item ``i``."""
    if spec.kind == "lognormal":
        prompt = _lognormal(rng, spec.input_tokens, spec.input_sigma, spec.max_input_tokens)
        out = _lognormal(rng, spec.output_tokens, spec.output_sigma, spec.max_output_tokens)
        return prompt, out, "lognormal"
    if spec.kind == "mix":
        long = rng.random() < spec.long_fraction
        prompt = spec.long_tokens if long else spec.short_tokens
        return prompt, spec.output_tokens, "long" if long else "short"
    if spec.kind == "shared-prefix":
        return spec.input_tokens, spec.output_tokens, f"prefix-{i % spec.prefix_groups}"
    return spec.input_tokens, spec.output_tokens, "fixed"


def build_items(
    spec: WorkloadSpec, tokenizer: Tokenizer, count: int, seed: int, salt: int
) -> list[WorkItem]:
    """``count`` items: the same lengths for every ``salt``, different text for each."""
    if spec.kind == "dataset":
        return load_dataset(spec, tokenizer)[: max(count, 1)]
    if spec.kind == "multi-turn":
        return build_conversations(spec, tokenizer, count, random.Random(f"{seed}/{salt}"))
    lengths_rng = random.Random(seed)
    text_rng = random.Random(f"{seed}/{salt}")
    prefixes: dict[str, tuple[str, int]] = {}
    items: list[WorkItem] = []
    for i in range(count):
        prompt_tokens, max_tokens, shape = _lengths(spec, lengths_rng, i)
        text, got = fit_prompt(tokenizer, prompt_tokens, text_rng)
        if spec.kind == "shared-prefix":
            if shape not in prefixes:
                prefixes[shape] = fit_prompt(tokenizer, spec.prefix_tokens, text_rng)
            prefix, _ = prefixes[shape]
            text = f"{prefix} {text}"
            got = len(tokenizer.encode(text))
        items.append(WorkItem(text, got, max_tokens, shape))
    return items


def build_conversations(
    spec: WorkloadSpec, tokenizer: Tokenizer, count: int, rng: random.Random
) -> list[WorkItem]:
    """Chat conversations whose every turn resends the history, so prefixes repeat.

    Each conversation opens with its own system prompt of ``prefix_tokens``; turn ``t`` sends
    the system prompt, the ``t - 1`` earlier user messages (``input_tokens`` each) with an
    assistant answer of ``output_tokens`` after each, and a new user message. The order is
    turn by turn across ``conversations`` conversations (turn 1 of all, then turn 2 of all, ...),
    so a turn leaves ``conversations`` requests after the one before it: with an open loop, the
    earlier turn has usually been answered by then, as a user would have read it. After
    ``turns`` turns a fresh set of conversations starts.
    """
    items: list[WorkItem] = []
    while len(items) < count:
        batch = [_conversation(spec, tokenizer, rng) for _ in range(spec.conversations)]
        for turn in range(spec.turns):
            items += (conversation[turn] for conversation in batch)
    return items[:count]


def _conversation(spec: WorkloadSpec, tokenizer: Tokenizer, rng: random.Random) -> list[WorkItem]:
    system, system_tokens = fit_prompt(tokenizer, spec.prefix_tokens, rng)
    history: list[dict[str, Any]] = [{"role": "system", "content": system}]
    tokens = system_tokens
    turns: list[WorkItem] = []
    for turn in range(1, spec.turns + 1):
        question, got = fit_prompt(tokenizer, spec.input_tokens, rng)
        history.append({"role": "user", "content": question})
        tokens += got
        turns.append(WorkItem(question, tokens, spec.output_tokens, f"turn-{turn}", tuple(history)))
        answer, got = fit_prompt(tokenizer, spec.output_tokens, rng)
        history.append({"role": "assistant", "content": answer})
        tokens += got
    return turns


def _dataset_item(line: bytes, number: int, spec: WorkloadSpec, tokenizer: Tokenizer) -> WorkItem:
    try:
        row = orjson.loads(line)
    except orjson.JSONDecodeError as e:
        raise WorkloadError(f"dataset line {number}: not JSON ({e})") from e
    if not isinstance(row, dict):
        raise WorkloadError(f"dataset line {number}: expected an object")
    max_tokens = row.get("max_tokens", row.get("output_tokens", spec.output_tokens))
    if not isinstance(max_tokens, int) or not 1 <= max_tokens <= spec.max_output_tokens:
        raise WorkloadError(
            f"dataset line {number}: max_tokens must be 1..{spec.max_output_tokens}"
        )
    messages = row.get("messages")
    if isinstance(messages, list) and all(isinstance(m, dict) for m in messages):
        text = "\n".join(str(m.get("content", "")) for m in messages)
        return WorkItem(text, len(tokenizer.encode(text)), max_tokens, "dataset", tuple(messages))
    prompt = row.get("prompt")
    if not isinstance(prompt, str):
        raise WorkloadError(f"dataset line {number}: needs a 'prompt' string or 'messages' list")
    return WorkItem(prompt, len(tokenizer.encode(prompt)), max_tokens, "dataset")


def load_dataset(spec: WorkloadSpec, tokenizer: Tokenizer) -> list[WorkItem]:
    """Items from a JSON-lines file: ``{"prompt": ...}`` or ``{"messages": [...]}``, each with an
    optional ``max_tokens``. Bounded: at most ``MAX_DATASET_LINES`` lines of at most 1 MiB."""
    if spec.dataset is None:
        raise WorkloadError("the dataset workload needs --dataset FILE")
    items: list[WorkItem] = []
    try:
        with spec.dataset.open("rb") as f:
            for number, line in enumerate(f, 1):
                if len(items) >= MAX_DATASET_LINES:
                    break
                if len(line) > MAX_DATASET_LINE_BYTES:
                    raise WorkloadError(f"dataset line {number}: longer than 1 MiB")
                if line.strip():
                    items.append(_dataset_item(line, number, spec, tokenizer))
    except OSError as e:
        raise WorkloadError(f"cannot read dataset {spec.dataset}: {e}") from e
    if not items:
        raise WorkloadError(f"dataset {spec.dataset} has no prompts")
    return items
