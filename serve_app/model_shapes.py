"""The models ``pd-serve local up`` makes on the spot (no download), by ``model.local_shape``.

- ``tiny``: :func:`serve_app.tiny_model.make_tiny_model`, random weights, 2 layers.
- ``llama-3-8b``: Llama 3 8B's shape (32 layers, hidden 4096, 14336 intermediate, 32 heads, 8 KV
  heads, head_dim 128: 128 KiB of bf16 KV cache per token, like the real model) as a
  ``config.json`` beside the tiny model's tokenizer, and no weights: vLLM's ``load_format:
  dummy`` fills them at random on the GPU, so an engine computes what the real model computes.
  One difference: the vocabulary is the tiny tokenizer's 2048 tokens, not 128256, so the
  embedding and the LM head are 2048 wide (7.00B parameters instead of 8.03B; 14.0 GB of bf16
  weights instead of 16.1 GB). A vocabulary wider than the tokenizer would sample ids it cannot
  decode::

    make_local_model(Path("/tmp/pd-gpu/llama-3-8b"), "llama-3-8b")
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Literal

from serve_app.tiny_model import VOCAB_SIZE, make_tiny_model, save_tokenizer

Shape = Literal["tiny", "llama-3-8b"]

# meta-llama/Meta-Llama-3-8B's config.json, but for the vocabulary (see the module docstring).
LLAMA_3_8B: dict[str, Any] = {
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "hidden_size": 4096,
    "intermediate_size": 14336,
    "num_hidden_layers": 32,
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
    "head_dim": 128,
    "hidden_act": "silu",
    "max_position_embeddings": 8192,
    "rms_norm_eps": 1e-5,
    "rope_theta": 500000.0,
    "attention_bias": False,
    "mlp_bias": False,
    "tie_word_embeddings": False,
    "vocab_size": VOCAB_SIZE,
    "pad_token_id": 0,
    "bos_token_id": 1,
    "eos_token_id": 2,
    "torch_dtype": "bfloat16",
}
_DONE_MARKER = "local-shape.json"


def shape_parameters(config: dict[str, Any]) -> int:
    """Parameters of a Llama-shaped config (embedding, layers, final norm, LM head)."""
    hidden, layers = config["hidden_size"], config["num_hidden_layers"]
    head_dim = config.get("head_dim") or hidden // config["num_attention_heads"]
    q = hidden * config["num_attention_heads"] * head_dim
    kv = 2 * hidden * config["num_key_value_heads"] * head_dim
    o = config["num_attention_heads"] * head_dim * hidden
    mlp = 3 * hidden * config["intermediate_size"]
    per_layer = q + kv + o + mlp + 2 * hidden
    return int(2 * config["vocab_size"] * hidden + layers * per_layer + hidden)


def kv_bytes_per_token(config: dict[str, Any], dtype_bytes: int = 2) -> int:
    """K and V of every layer for one token."""
    head_dim = config.get("head_dim") or config["hidden_size"] // config["num_attention_heads"]
    return int(2 * config["num_hidden_layers"] * config["num_key_value_heads"] * head_dim
               * dtype_bytes)  # fmt: skip


def make_local_model(folder: Path, shape: Shape) -> Path:
    """Write ``shape`` into ``folder`` unless it is there already; returns ``folder``."""
    if shape == "tiny":
        return make_tiny_model(folder)
    if (folder / _DONE_MARKER).is_file():
        return folder
    folder.mkdir(parents=True, exist_ok=True)
    save_tokenizer(folder)
    (folder / "config.json").write_text(json.dumps(LLAMA_3_8B, indent=2))
    # Written last: a folder without it is an interrupted run and is made again.
    (folder / _DONE_MARKER).write_text(json.dumps({"shape": shape, "weights": "none (dummy)"}))
    return folder
