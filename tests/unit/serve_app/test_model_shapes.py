"""The models `local up` makes on the spot: the Llama 3 8B shape with no weights."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from serve_app.loader import ConfigError, load_serving_config
from serve_app.model_shapes import (
    LLAMA_3_8B,
    kv_bytes_per_token,
    make_local_model,
    shape_parameters,
)

EXAMPLE = Path(__file__).parents[3] / "examples" / "serving" / "local-gpu-llama-8b.yaml"


def test_the_shape_is_llama_3_8b_but_for_the_vocabulary() -> None:
    # With Llama 3's own vocabulary the shape has Llama 3 8B's 8.03B parameters.
    assert shape_parameters({**LLAMA_3_8B, "vocab_size": 128256}) == 8_030_261_248
    assert 6.9e9 < shape_parameters(LLAMA_3_8B) < 7.0e9
    assert kv_bytes_per_token(LLAMA_3_8B) == 128 * 1024  # bf16 K and V, 32 layers, 8 KV heads


def test_make_local_model_writes_a_config_and_the_tiny_tokenizer(tmp_path: Path) -> None:
    pytest.importorskip("transformers")  # the serving stack's (serve-cpu / serve-gpu extras)
    folder = make_local_model(tmp_path / "llama", "llama-3-8b")
    config = json.loads((folder / "config.json").read_text())
    assert config["num_hidden_layers"] == 32 and config["hidden_size"] == 4096
    assert (folder / "tokenizer.json").is_file()
    assert not list(folder.glob("*.safetensors"))  # no weights: vLLM's load_format dummy
    marker = (folder / "local-shape.json").stat().st_mtime_ns
    make_local_model(folder, "llama-3-8b")  # complete: kept as it is
    assert (folder / "local-shape.json").stat().st_mtime_ns == marker


def test_the_example_names_the_shape_and_dummy_weights_everywhere() -> None:
    cfg = load_serving_config(EXAMPLE, env={"PD_SERVE_LOCAL_DIR": "/tmp/x"})
    assert cfg.model.local_shape == "llama-3-8b"
    assert cfg.model.source == "/tmp/x/llama-3-8b"


def test_a_shape_without_dummy_weights_is_refused(tmp_path: Path) -> None:
    broken = tmp_path / "broken.yaml"
    broken.write_text(EXAMPLE.read_text().replace("load_format: dummy", "load_format: auto"))
    with pytest.raises(ConfigError) as err:
        load_serving_config(broken, env={})
    assert "pd.prefill.engine_kwargs.load_format" in str(err.value)
    assert "colocated.engine_kwargs.load_format" in str(err.value)
