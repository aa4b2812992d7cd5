"""Which tokenizer counts a model's prompts: the config section, checked when it is loaded."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field, model_validator

from configkit import StrictModel

MIN_SAMPLE_CHARS = 1024
"""The least text a request encodes exactly before it estimates the rest."""


class TokenizerConfig(StrictModel):
    """Which tokenizer counts a model's prompts, and the chat template's overhead in tokens."""

    kind: Literal["tiktoken", "huggingface"] = "tiktoken"
    encoding: Literal["cl100k_base", "o200k_base"] = "cl100k_base"
    """tiktoken only: the encoding, shipped with the gateway (no download)."""
    tokenizer_file: Path | None = None
    """huggingface only: the model's ``tokenizer.json``. The chat template beside it
    (``chat_template.jinja``, or ``chat_template`` in ``tokenizer_config.json``) sets the
    per-message and reply overheads, unless they are given here."""
    max_exact_chars: int = Field(16384, ge=MIN_SAMPLE_CHARS)
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
