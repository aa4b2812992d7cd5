"""The rendered Serve config is what Ray Serve itself accepts: its schema and its builders' args."""

from __future__ import annotations

import importlib
import importlib.util
import warnings
from pathlib import Path
from typing import Any

import pytest
import yaml

from serve_app.config import ServingConfig
from serve_app.loader import load_serving_config
from serve_app.render import (
    COLOCATED_BUILDER,
    PD_BUILDER,
    render_rayservice_serve_config_v2,
    render_serve_config,
)

EXAMPLES = Path(__file__).parents[3] / "examples" / "serving"
CONFIGS = ["qwen3.5-9b-g6.yaml", "local-cpu.yaml"]

needs_ray = pytest.mark.skipif(
    importlib.util.find_spec("ray") is None,
    reason="ray is not installed (the serve-cpu extra); Ray's own schemas cannot be loaded",
)


def ray_attr(module: str, name: str) -> Any:
    """Import from Ray with its own pydantic-v1-style deprecation warnings silenced: they are
    Ray's, not ours, and pytest turns warnings into errors."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        return getattr(importlib.import_module(module), name)


def example(name: str) -> ServingConfig:
    return load_serving_config(EXAMPLES / name, env={"PD_SERVE_LOCAL_DIR": "/srv/pd"})


def applications(cfg: ServingConfig) -> dict[str, dict[str, Any]]:
    return {app["name"]: app for app in render_serve_config(cfg)["applications"]}


def test_pd_app_uses_rays_stock_pd_builder_with_nixl_on_both_sides() -> None:
    pd = applications(example("qwen3.5-9b-g6.yaml"))["pd"]
    assert (pd["import_path"], pd["route_prefix"]) == (PD_BUILDER, "/pd")
    for side in ("prefill_config", "decode_config"):
        llm = pd["args"][side]
        kv = llm["engine_kwargs"]["kv_transfer_config"]
        assert kv["kv_connector"] == "NixlConnector"
        assert kv["kv_connector_extra_config"] == {"backends": ["LIBFABRIC"]}
        assert llm["runtime_env"]["env_vars"]["FI_PROVIDER"] == "efa"
        assert llm["accelerator_type"] == "L4"
        assert llm["engine_kwargs"]["gpu_memory_utilization"] == 0.90
    assert (
        pd["args"]["prefill_config"]["engine_kwargs"]["kv_transfer_config"]["engine_id"]
        != (pd["args"]["decode_config"]["engine_kwargs"]["kv_transfer_config"]["engine_id"])
    )


def test_colocated_app_uses_rays_stock_openai_builder_without_kv_transfer() -> None:
    colocated = applications(example("qwen3.5-9b-g6.yaml"))["colocated"]
    assert colocated["import_path"] == COLOCATED_BUILDER
    (llm,) = colocated["args"]["llm_configs"]
    assert "kv_transfer_config" not in llm["engine_kwargs"]
    assert llm["deployment_config"]["autoscaling_config"]["max_replicas"] == 2


def test_local_profile_places_engines_on_cpu_and_serves_on_loopback() -> None:
    document = render_serve_config(example("local-cpu.yaml"))
    assert document["http_options"] == {"host": "127.0.0.1", "port": 8000}
    for app in document["applications"]:
        llms = app["args"].get("llm_configs") or [
            app["args"]["prefill_config"],
            app["args"]["decode_config"],
        ]
        for llm in llms:
            assert llm["accelerator_config"] == {"kind": "cpu"}
            assert llm["model_loading_config"]["model_source"] == "/srv/pd/tiny-model"


def test_rayservice_block_is_the_same_document_on_the_pods_serve_port() -> None:
    cfg = example("qwen3.5-9b-g6.yaml")
    block = yaml.safe_load(render_rayservice_serve_config_v2(cfg))
    assert block["applications"] == render_serve_config(cfg)["applications"]
    assert block["http_options"] == {"host": "0.0.0.0", "port": 8000}


@needs_ray
@pytest.mark.parametrize("name", CONFIGS)
def test_rendered_config_loads_into_ray_serves_deploy_schema(name: str) -> None:
    ServeDeploySchema = ray_attr("ray.serve.schema", "ServeDeploySchema")

    text = render_rayservice_serve_config_v2(example(name))
    schema = ServeDeploySchema.model_validate(yaml.safe_load(text))
    assert [app.name for app in schema.applications] == ["pd", "colocated"]
    assert [app.import_path for app in schema.applications] == [PD_BUILDER, COLOCATED_BUILDER]


@needs_ray
@pytest.mark.parametrize("name", CONFIGS)
def test_rendered_args_load_into_the_builders_argument_models(name: str) -> None:
    PDServingArgs = ray_attr(
        "ray.llm._internal.serve.serving_patterns.prefill_decode.builder", "PDServingArgs"
    )
    LLMServingArgs = ray_attr("ray.serve.llm", "LLMServingArgs")

    apps = applications(example(name))
    pd_args = PDServingArgs.model_validate(apps["pd"]["args"])
    assert pd_args.prefill_config.model_id == pd_args.decode_config.model_id
    decode_kv = pd_args.decode_config.engine_kwargs["kv_transfer_config"]
    assert decode_kv["kv_role"] == "kv_consumer"
    colocated_args = LLMServingArgs.model_validate(apps["colocated"]["args"])
    assert len(colocated_args.llm_configs) == 1
