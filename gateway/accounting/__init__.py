"""Accounting: prompt token counting (``tokens``) and, beside it, the usage ledger."""

from gateway.tokens import (
    TokenCounter,
    TokenizerConfig,
    TokenizerUnavailable,
    build_token_counter,
)

__all__ = ["TokenCounter", "TokenizerConfig", "TokenizerUnavailable", "build_token_counter"]
