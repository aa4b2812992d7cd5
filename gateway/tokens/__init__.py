"""Prompt tokens: the tokenizer config, loading, the chat template's overhead, counting."""

from gateway.tokens.config import TokenizerConfig, TokenizerUnavailable
from gateway.tokens.counting import PromptTokens, TokenCounter
from gateway.tokens.loading import (
    build_token_counter,
    counters_for_models,
    install_packaged_bpe,
    tiktoken_cache_dir,
)

__all__ = [
    "PromptTokens",
    "TokenCounter",
    "TokenizerConfig",
    "TokenizerUnavailable",
    "build_token_counter",
    "counters_for_models",
    "install_packaged_bpe",
    "tiktoken_cache_dir",
]
