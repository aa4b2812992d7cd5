"""The serving config: each silent-breakage mistake gives an error naming its key."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml

from serve_app.loader import ConfigError, load_serving_config, parse_serving_config

EXAMPLES = Path(__file__).parents[3] / "examples" / "serving"
PRODUCTION = EXAMPLES / "qwen3.5-9b-g6.yaml"


def production() -> dict[str, Any]:
    doc: dict[str, Any] = yaml.safe_load(PRODUCTION.read_text())
    # The example shares one env mapping between both sides (a YAML anchor): unshare it so a test
    # can break one side alone.
    doc["pd"]["decode"]["env"] = copy.deepcopy(doc["pd"]["decode"]["env"])
    return doc


def error_of(document: dict[str, Any]) -> str:
    with pytest.raises(ConfigError) as caught:
        parse_serving_config(document, env={})
    return str(caught.value)


@pytest.mark.parametrize("name", ["qwen3.5-9b-g6.yaml", "local-cpu.yaml"])
def test_examples_validate(name: str) -> None:
    cfg = load_serving_config(EXAMPLES / name, env={"PD_SERVE_LOCAL_DIR": "/srv/pd"})
    assert cfg.pd is not None and cfg.colocated is not None


def test_production_example_is_the_walkthroughs() -> None:
    cfg = load_serving_config(PRODUCTION, env={})
    assert (cfg.model.source, cfg.model.max_model_len, cfg.model.dtype) == (
        "Qwen/Qwen3.5-9B",
        4096,
        "bfloat16",
    )
    assert cfg.model.gpu_memory_utilization == 0.90
    assert cfg.accelerator.type == "L4"
    assert cfg.pd is not None
    for side in (cfg.pd.prefill, cfg.pd.decode):
        assert side.replicas == 1
        assert side.kv_transfer_config is not None
        assert side.kv_transfer_config.kv_connector == "NixlConnector"
        assert side.kv_transfer_config.kv_connector_extra_config.backends == ("LIBFABRIC",)


def test_local_profile_model_source_comes_from_the_environment() -> None:
    cfg = load_serving_config(EXAMPLES / "local-cpu.yaml", env={"PD_SERVE_LOCAL_DIR": "/x"})
    assert cfg.model.source == "/x/tiny-model"


def test_misspelt_backends_key_is_named_with_a_suggestion() -> None:
    doc = production()
    extra = doc["pd"]["decode"]["kv_transfer_config"]["kv_connector_extra_config"]
    extra["backend"] = extra.pop("backends")
    message = error_of(doc)
    assert "pd.decode.kv_transfer_config.kv_connector_extra_config.backend: unknown key" in message
    assert "did you mean 'backends'?" in message


def test_libfabric_without_efa_environment() -> None:
    doc = production()
    doc["pd"]["prefill"]["env"] = {"VLLM_SSM_CONV_STATE_LAYOUT": "DS"}
    message = error_of(doc)
    assert "pd.prefill.env.FI_PROVIDER: backend LIBFABRIC needs FI_PROVIDER=efa" in message
    assert "pd.decode" not in message


def test_efa_environment_may_come_from_the_top_level_env() -> None:
    doc = production()
    for side in ("prefill", "decode"):
        doc["pd"][side]["env"] = {"VLLM_SSM_CONV_STATE_LAYOUT": "DS"}
    doc["env"] = {"FI_PROVIDER": "efa"}
    assert parse_serving_config(doc, env={}).pd is not None


def test_prefill_and_decode_on_different_models() -> None:
    doc = production()
    doc["pd"]["decode"]["model_source"] = "Qwen/Qwen3.5-4B"
    message = error_of(doc)
    assert "pd.decode.model_source: decode serves 'Qwen/Qwen3.5-4B'" in message
    assert "prefill serves 'Qwen/Qwen3.5-9B'" in message


def test_equal_engine_ids() -> None:
    doc = production()
    doc["pd"]["decode"]["kv_transfer_config"]["engine_id"] = "qwen35-9b-prefill"
    assert "pd.decode.kv_transfer_config.engine_id: 'qwen35-9b-prefill' is also prefill's" in (
        error_of(doc)
    )


@pytest.mark.parametrize("side", ["prefill", "decode"])
def test_missing_kv_transfer_config(side: str) -> None:
    doc = production()
    del doc["pd"][side]["kv_transfer_config"]
    assert f"pd.{side}.kv_transfer_config: missing" in error_of(doc)


def test_kv_transfer_config_inside_engine_kwargs_is_refused() -> None:
    doc = production()
    doc["pd"]["prefill"]["engine_kwargs"] = {"kv_transfer_config": {"kv_connector": "Nixl"}}
    assert "pd.prefill.engine_kwargs.kv_transfer_config: set it as kv_transfer_config" in (
        error_of(doc)
    )


def test_hybrid_model_without_its_nixl_environment() -> None:
    doc = production()
    del doc["pd"]["decode"]["env"]["VLLM_SSM_CONV_STATE_LAYOUT"]
    message = error_of(doc)
    assert "pd.decode.env.VLLM_SSM_CONV_STATE_LAYOUT" in message
    assert "VLLM_SSM_CONV_STATE_LAYOUT=DS" in message
    assert "pd.prefill.env" not in message


def test_hybrid_model_detected_from_a_local_folder(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text('{"model_type": "qwen3_next"}')
    doc = production()
    doc["model"]["source"] = str(tmp_path)
    del doc["pd"]["prefill"]["env"]["VLLM_SSM_CONV_STATE_LAYOUT"]
    assert "pd.prefill.env.VLLM_SSM_CONV_STATE_LAYOUT" in error_of(doc)


def test_removed_proxy_cls_config() -> None:
    doc = production()
    doc["pd"]["proxy_cls_config"] = {"proxy_cls": "ray.serve.llm:PDProxyServer"}
    message = error_of(doc)
    assert "pd.proxy_cls_config: removed from Ray Serve LLM in 2.59" in message


def test_unknown_top_level_key() -> None:
    doc = production()
    doc["colocted"] = {}
    assert "colocted: unknown key (did you mean 'colocated'?)" in error_of(doc)


def test_type_errors_name_the_key() -> None:
    doc = production()
    doc["model"]["max_model_len"] = 0
    assert "model.max_model_len: input should be greater than 0" in error_of(doc)


def test_cuda_buffer_on_cpu_and_gpu_memory_on_cpu() -> None:
    doc = production()
    doc["accelerator"] = {"kind": "cpu"}
    message = error_of(doc)
    assert "model.gpu_memory_utilization: not used with accelerator.kind cpu" in message
    assert "pd.prefill.kv_transfer_config.kv_buffer_device: must be cpu" in message


def test_every_problem_is_reported_at_once() -> None:
    doc = production()
    doc["pd"]["decode"]["kv_transfer_config"]["engine_id"] = "qwen35-9b-prefill"
    doc["pd"]["decode"]["model_source"] = "other/model"
    message = error_of(doc)
    assert "engine_id" in message and "model_source" in message


def test_environment_variable_not_set() -> None:
    doc = production()
    doc["model"]["source"] = "${MODEL_DIR}"
    assert "model.source: environment variable MODEL_DIR is not set" in error_of(doc)


def test_config_is_frozen() -> None:
    cfg = load_serving_config(PRODUCTION, env={})
    with pytest.raises(ValueError, match="frozen"):
        cfg.model.max_model_len = 8  # type: ignore[misc]
