"""Deterministic text for the simulator: prompt token estimates, output words, embeddings.

Prompt token estimate (documented, not a real tokenizer): every whitespace-separated word of
the prompt counts as one token. A chat request adds ``MESSAGE_OVERHEAD_TOKENS`` per message
(role and template markers) plus ``REPLY_PRIMING_TOKENS`` once (the assistant turn opener).
A completion prompt given as a list of token ids counts one token per id.
"""

from __future__ import annotations

import hashlib
import math
import struct
import zlib
from collections.abc import Iterable
from typing import Any

MESSAGE_OVERHEAD_TOKENS = 4
REPLY_PRIMING_TOKENS = 2

WORDS: tuple[str, ...] = (
    "the", "quick", "brown", "fox", "jumps", "over", "a", "lazy", "dog", "while",
    "simulated", "tokens", "flow", "from", "prefill", "to", "decode", "and", "back", "again",
    "every", "stream", "carries", "one", "word", "per", "chunk", "so", "tests", "can",
    "count", "them", "with", "ease", "under", "load", "or", "at", "rest", "in",
    "bright", "morning", "light", "cache", "blocks", "move", "across", "nodes", "quietly", "now",
    "river", "stone", "cloud", "paper", "signal", "garden", "engine", "window", "silver", "orbit",
    "lantern", "meadow", "harbor", "echo",
)  # fmt: skip


def message_text(content: Any) -> str:
    """The text of one chat message content: a string, or a list of parts with ``text``."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return " ".join(
            part["text"]
            for part in content
            if isinstance(part, dict) and isinstance(part.get("text"), str)
        )
    return ""


def chat_prompt(messages: Iterable[dict[str, Any]]) -> tuple[str, int]:
    """The joined prompt text and its estimated token count for chat ``messages``."""
    texts = [message_text(m.get("content")) for m in messages]
    words = sum(len(t.split()) for t in texts)
    tokens = words + MESSAGE_OVERHEAD_TOKENS * len(texts) + REPLY_PRIMING_TOKENS
    return "\n".join(texts), tokens


def chat_tokens(messages: Iterable[dict[str, Any]]) -> list[str]:
    """The chat prompt as the simulator's tokens, as many as :func:`chat_prompt` counts.

    Each message is ``<|start|> role \\n words... <|end|>`` (its four overhead tokens), then the
    reply opener ``<|start|> assistant``: a template like a real one, so two conversations share
    cached blocks exactly as far as their messages are the same.
    """
    tokens: list[str] = []
    for m in messages:
        role = m.get("role")
        tokens += ("<|start|>", role[:32] if isinstance(role, str) else "?", "\n")
        tokens += message_text(m.get("content")).split()
        tokens.append("<|end|>")
    tokens += ("<|start|>", "assistant")
    return tokens


def completion_tokens(prompt: Any) -> list[str]:
    """A completion prompt as the simulator's tokens (words, or the token ids given)."""
    if isinstance(prompt, list) and all(isinstance(t, int) for t in prompt):
        return [str(t) for t in prompt]
    return completion_prompt(prompt)[0].split()


def completion_prompt(prompt: Any) -> tuple[str, int]:
    """The prompt text and its estimated token count for a text completion ``prompt``.

    Raises ``ValueError`` for a prompt shape the simulator does not accept.
    """
    if isinstance(prompt, str):
        return prompt, len(prompt.split())
    if isinstance(prompt, list) and all(isinstance(t, int) for t in prompt):
        return " ".join(map(str, prompt)), len(prompt)
    if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], str):
        return prompt[0], len(prompt[0].split())
    raise ValueError("prompt must be a string, a list with one string, or a list of token ids")


def prompt_seed(text: str) -> int:
    """A stable seed from the prompt, so the same prompt always gets the same words."""
    return zlib.crc32(text.encode("utf-8", "surrogatepass"))


def token_text(seed: int, index: int) -> str:
    """The ``index``-th output token for ``seed``: a word, led by a space after the first."""
    word = WORDS[(seed + index * 7) % len(WORDS)]
    return word if index == 0 else " " + word


def output_text(seed: int, count: int) -> str:
    """All ``count`` output tokens joined, as a non-streaming response carries them."""
    return "".join(token_text(seed, k) for k in range(count))


def embedding(text: str, dim: int) -> list[float]:
    """A deterministic unit vector of ``dim`` floats derived from a hash of ``text``."""
    raw = b""
    counter = 0
    while len(raw) < 4 * dim:
        raw += hashlib.blake2b(f"{counter}:{text}".encode(), digest_size=64).digest()
        counter += 1
    ints = struct.unpack(f"<{dim}I", raw[: 4 * dim])
    values = [i / 2**31 - 1.0 for i in ints]
    norm = math.sqrt(sum(v * v for v in values)) or 1.0
    return [v / norm for v in values]
