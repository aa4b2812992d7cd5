"""A tiny random-weight Llama model with a real BPE tokenizer, made locally with no download.

The local CPU profile serves it: vLLM loads it like any Hugging Face checkpoint, so the whole
stack (Ray Serve LLM, vLLM's CPU engine, NIXL) runs for real in seconds of compute per request.
Its output is gibberish by design; greedy decoding makes it deterministic::

    make_tiny_model(Path("/tmp/pd-serve/tiny-model"))

The tokenizer is a byte-level BPE trained on the Python standard library's own sources, which
every Python installation carries.
"""

from __future__ import annotations

import json
import sysconfig
from collections.abc import Iterator
from pathlib import Path
from typing import Any

VOCAB_SIZE = 2048
SPECIAL_TOKENS = ("<|pad|>", "<|bos|>", "<|eos|>", "<|im_start|>", "<|im_end|>")
# ChatML-style: the server renders chat messages with it (vLLM refuses chat without a template).
CHAT_TEMPLATE = (
    "{% for message in messages %}<|im_start|>{{ message['role'] }}\n"
    "{{ message['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
_DONE_MARKER = "tiny-model.json"


def _stdlib_text(max_files: int = 400) -> Iterator[str]:
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    for path in sorted(stdlib.glob("*.py"))[:max_files]:
        yield path.read_text(errors="ignore")


def save_tokenizer(folder: Path) -> None:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB_SIZE,
        special_tokens=list(SPECIAL_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    tokenizer.train_from_iterator(_stdlib_text(), trainer=trainer)
    roles = {"pad_token": "<|pad|>", "bos_token": "<|bos|>", "eos_token": "<|eos|>"}
    fast_tokenizer: Any = PreTrainedTokenizerFast  # untyped constructor
    fast = fast_tokenizer(tokenizer_object=tokenizer, **roles)
    fast.chat_template = CHAT_TEMPLATE
    fast.save_pretrained(folder)


def _save_model(folder: Path, seed: int) -> None:
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    config = LlamaConfig(
        vocab_size=VOCAB_SIZE,
        hidden_size=128,
        intermediate_size=256,
        num_hidden_layers=2,
        num_attention_heads=4,  # head_dim 32: vLLM's CPU attention refuses 16
        num_key_value_heads=2,
        max_position_embeddings=2048,
        pad_token_id=0,
        bos_token_id=1,
        eos_token_id=2,
        dtype="bfloat16",
    )
    llama: Any = LlamaForCausalLM  # transformers' constructors are untyped
    model = llama(config).to(torch.bfloat16)
    model.save_pretrained(folder, safe_serialization=True)


def make_tiny_model(folder: Path, seed: int = 0) -> Path:
    """Write the model and tokenizer into ``folder`` (kept if already complete); returns it."""
    marker = folder / _DONE_MARKER
    if marker.is_file():
        return folder
    folder.mkdir(parents=True, exist_ok=True)
    save_tokenizer(folder)
    _save_model(folder, seed)
    # Written last: a folder without it is an interrupted run and is made again.
    marker.write_text(json.dumps({"seed": seed, "vocab_size": VOCAB_SIZE}))
    return folder
