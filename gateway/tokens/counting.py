"""Prompt token counting: one counter per model, used by admission (rate limits) and routing.

A counter wraps a real tokenizer (loaded by gateway/tokens/loading.py)::

    counter = build_token_counter(TokenizerConfig(encoding="cl100k_base"))
    counter.count_request(Operation.CHAT, {"messages": [{"role": "user", "content": "hi"}]})

Chat requests include the template overhead (per message, per name, and the reply's priming).
The cost is bounded: each request encodes at most ``max_exact_chars`` characters exactly; text
beyond that is estimated from samples, so a 32k-token prompt costs about as much as a 4k one.
The count is a reservation and a routing signal, settled later against the upstream's usage.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any

import orjson

from gateway.tokens.config import MIN_SAMPLE_CHARS, TokenizerConfig
from gateway.wire.request import Operation

EncodeCount = Callable[[str], int]
"""``count(text)``: the number of tokens in ``text``, special-token text treated as plain text."""

_SAMPLE_WINDOWS = 4
_FALLBACK_TOKENS_PER_CHAR = 0.25  # before anything was counted exactly: ~4 characters a token


class TokenCounter:
    """Counts the prompt tokens of one OpenAI request with a real tokenizer::

    counter = TokenCounter(lambda text: len(text.split()), TokenizerConfig())
    counter.count_request(Operation.COMPLETION, {"prompt": "one two three"})  # 3
    """

    def __init__(self, count: EncodeCount, config: TokenizerConfig) -> None:
        self._count = count
        self.config = config

    def count_text(self, text: str) -> int:
        """Tokens in one text, exact up to ``max_exact_chars``, estimated from samples beyond."""
        tally = _Tally(self._count, self.config.max_exact_chars)
        tally.add(text)
        return tally.tokens

    def count_request(self, operation: Operation, payload: Mapping[str, Any]) -> int:
        """Prompt tokens of a parsed request body; unknown shapes count as nothing (the upstream
        rejects them), so this never raises on a body that passed the parse stage."""
        tally = _Tally(self._count, self.config.max_exact_chars)
        if operation.counted_as is Operation.CHAT:
            self._tally_chat(tally, payload)
        elif operation is Operation.COMPLETION:
            _tally_prompt(tally, payload.get("prompt"))
        else:
            _tally_prompt(tally, payload.get("input"))
        return tally.tokens

    def _tally_chat(self, tally: _Tally, payload: Mapping[str, Any]) -> None:
        cfg = self.config
        messages = payload.get("messages")
        if not isinstance(messages, list):
            return
        tally.tokens += cfg.tokens_per_reply
        for message in messages:
            if not isinstance(message, dict):
                continue
            tally.tokens += cfg.tokens_per_message
            for key, value in message.items():
                if key == "content":
                    self._tally_content(tally, value)
                elif key == "name" and isinstance(value, str):
                    tally.tokens += cfg.tokens_per_name
                    tally.add(value)
                elif key in ("role", "tool_call_id") and isinstance(value, str):
                    tally.add(value)
                elif key in ("tool_calls", "function_call") and value:
                    tally.add(orjson.dumps(value).decode())
        tools = payload.get("tools") or payload.get("functions")
        if tools:
            tally.add(orjson.dumps(tools).decode())

    def _tally_content(self, tally: _Tally, content: object) -> None:
        if isinstance(content, str):
            tally.add(content)
            return
        if not isinstance(content, list):
            return
        for part in content:
            if not isinstance(part, dict):
                continue
            text = part.get("text")
            if isinstance(text, str):
                tally.add(text)
            elif part.get("type") in ("image_url", "input_image"):
                tally.tokens += self.config.tokens_per_image


def _tally_prompt(tally: _Tally, prompt: object) -> None:
    """A completions ``prompt`` or embeddings ``input``: text, texts, token ids, or lists of ids."""
    if isinstance(prompt, str):
        tally.add(prompt)
    elif isinstance(prompt, list):
        for item in prompt:
            if isinstance(item, str):
                tally.add(item)
            elif isinstance(item, int):
                tally.tokens += 1
            elif isinstance(item, list):
                tally.tokens += len(item)


class _Tally:
    """Tokens of one request so far, with a budget of characters to encode exactly.

    Text within the budget is encoded; a text larger than what is left is estimated from evenly
    spaced sample windows; once the budget is spent, texts are estimated from the tokens-per-char
    ratio measured so far. So a request never encodes more than the budget (plus one minimum
    sample), however long or however many messages it has.
    """

    __slots__ = ("_count", "_counted_chars", "_counted_tokens", "_left", "tokens")

    def __init__(self, count: EncodeCount, budget: int) -> None:
        self._count = count
        self._left = budget
        self._counted_chars = 0
        self._counted_tokens = 0
        self.tokens = 0

    def add(self, text: str) -> None:
        size = len(text)
        if size <= self._left:
            self._left -= size
            self._exact(text)
        elif self._left >= MIN_SAMPLE_CHARS:
            self._sampled(text, self._left)
            self._left = 0
        else:
            self.tokens += math.ceil(size * self._ratio())

    def _exact(self, text: str) -> None:
        tokens = self._count(text)
        self._counted_chars += len(text)
        self._counted_tokens += tokens
        self.tokens += tokens

    def _sampled(self, text: str, budget: int) -> None:
        size = len(text)
        window = budget // _SAMPLE_WINDOWS
        step = (size - window) / (_SAMPLE_WINDOWS - 1)
        sampled = sum(
            self._count(text[round(i * step) : round(i * step) + window])
            for i in range(_SAMPLE_WINDOWS)
        )
        self._counted_chars += window * _SAMPLE_WINDOWS
        self._counted_tokens += sampled
        self.tokens += math.ceil(sampled * size / (window * _SAMPLE_WINDOWS))

    def _ratio(self) -> float:
        if self._counted_chars == 0:
            return _FALLBACK_TOKENS_PER_CHAR
        return self._counted_tokens / self._counted_chars


class PromptTokens:
    """A request's prompt tokens, counted at most once, when a stage first needs them.

    Admission (the token limits), routing (the length policy) and settling (a request charged
    its counted prompt) all ask the same value; a request that needs none of them never pays for
    counting::

        prompt = PromptTokens(counter, request.operation, request.payload)
        prompt.count()     # counts now
        prompt.count()     # the same number, not counted again
        prompt.counted     # the number, or None if nothing asked
    """

    __slots__ = ("_counter", "_operation", "_payload", "counted")

    def __init__(
        self, counter: TokenCounter, operation: Operation, payload: Mapping[str, Any]
    ) -> None:
        self._counter = counter
        self._operation = operation
        self._payload = payload
        self.counted: int | None = None

    def count(self) -> int:
        if self.counted is None:
            self.counted = self._counter.count_request(self._operation, self._payload)
        return self.counted
