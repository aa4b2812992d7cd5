"""The KV link is chosen per topology and rendered into the replicas' env; slow paths are named."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from configkit import ConfigError
from serve_app.kv_link import SAME_HOST_UCX_TLS, config_notices, resolve_link
from serve_app.loader import validate_document
from serve_app.render import render_serve_config

EXAMPLES = Path(__file__).parents[3] / "examples" / "serving"


def document(name: str) -> dict[str, Any]:
    text = (EXAMPLES / name).read_text().replace("${PD_SERVE_LOCAL_DIR:-/tmp/pd-serve}", "/srv")
    data: dict[str, Any] = yaml.safe_load(text)
    return data


def side_env(data: dict[str, Any], side: str) -> dict[str, str]:
    pd = render_serve_config(validate_document(data))["applications"][0]
    env: dict[str, str] = pd["args"][f"{side}_config"]["runtime_env"]["env_vars"]
    return env


def test_the_seeds_efa_config_takes_libfabric_with_no_ucx_transports() -> None:
    data = document("qwen3.5-9b-g6.yaml")
    cfg = validate_document(data)
    assert cfg.pd is not None and resolve_link(cfg, cfg.pd) == "efa"
    assert "UCX_TLS" not in side_env(data, "decode")
    assert config_notices(cfg) == []


def test_the_cpu_stack_moves_host_memory_and_announces_nothing() -> None:
    cfg = validate_document(document("local-cpu.yaml"))
    assert cfg.pd is not None and resolve_link(cfg, cfg.pd) == "host_memory"
    assert config_notices(cfg) == []


def test_one_host_renders_cuda_ipc_into_both_sides() -> None:
    data = document("local-gpu-llama-8b.yaml")
    for side in ("prefill", "decode"):
        assert side_env(data, side)["UCX_TLS"] == SAME_HOST_UCX_TLS


def test_gpus_on_one_machine_choose_same_host_by_themselves() -> None:
    data = document("local-gpu-llama-8b.yaml")
    del data["pd"]["kv_link"]
    data["accelerator"]["gpus"] = 3
    cfg = validate_document(data)
    assert cfg.pd is not None and resolve_link(cfg, cfg.pd) == "same_host"


def test_ucx_between_gpu_nodes_is_tcp_and_announced() -> None:
    data = document("local-gpu-llama-8b.yaml")
    del data["pd"]["kv_link"]
    cfg = validate_document(data)
    assert cfg.pd is not None and resolve_link(cfg, cfg.pd) == "tcp"
    assert "UCX_TLS" not in side_env(data, "decode")
    (notice,) = config_notices(cfg)
    assert "moves over TCP" in notice


def test_tcp_named_is_allowed_and_announced() -> None:
    data = document("local-gpu-llama-8b.yaml")
    data["pd"]["kv_link"] = "tcp"
    (notice,) = config_notices(validate_document(data))
    assert "as asked" in notice


def test_one_shared_gpu_says_the_pull_falls_back_to_tcp() -> None:
    data = document("local-gpu-llama-8b.yaml")
    data["accelerator"]["gpus"] = 1
    for side in ("prefill", "decode", "colocated"):
        node = data["colocated"] if side == "colocated" else data["pd"][side]
        node["gpu_fraction"], node["gpu_memory_utilization"] = 0.33, 0.3
    (notice,) = config_notices(validate_document(data))
    assert "falls back to TCP" in notice


@pytest.mark.parametrize(
    ("edit", "wrong"),
    [
        (lambda d: d["env"].update(UCX_TLS="tcp"), "pd.prefill.env.UCX_TLS"),
        (
            lambda d: d["env"].update(PYTORCH_CUDA_ALLOC_CONF="expandable_segments:True"),
            "pd.decode.env.PYTORCH_CUDA_ALLOC_CONF",
        ),
        (lambda d: d["pd"].update(kv_link="efa"), "needs backend LIBFABRIC"),
        (lambda d: d["pd"].update(kv_link="host_memory"), "host_memory is the CPU stack's"),
    ],
)
def test_a_same_host_link_that_would_fall_to_tcp_is_refused(edit: Any, wrong: str) -> None:
    data = document("local-gpu-llama-8b.yaml")
    edit(data)
    with pytest.raises(ConfigError, match=wrong):
        validate_document(data)


def test_efa_link_refuses_ucx_backends() -> None:
    data = document("qwen3.5-9b-g6.yaml")
    for side in ("prefill", "decode"):
        data["pd"][side]["kv_transfer_config"]["kv_connector_extra_config"]["backends"] = ["UCX"]
    data["pd"]["kv_link"] = "efa"
    with pytest.raises(ConfigError, match="kv_link efa needs backend LIBFABRIC"):
        validate_document(data)


def test_a_push_gets_each_sides_side_channel_port_that_ray_leaves_unset() -> None:
    data = document("local-gpu-llama-8b-push.yaml")
    assert side_env(data, "prefill")["VLLM_NIXL_SIDE_CHANNEL_PORT"] == "20000"
    assert side_env(data, "decode")["VLLM_NIXL_SIDE_CHANNEL_PORT"] == "22000"
    pull = document("local-gpu-llama-8b.yaml")
    assert "VLLM_NIXL_SIDE_CHANNEL_PORT" not in side_env(pull, "decode")


def test_a_push_on_one_side_and_a_pull_on_the_other_is_refused() -> None:
    data = document("local-gpu-llama-8b-push.yaml")
    data["pd"]["decode"]["kv_transfer_config"]["kv_connector"] = "NixlConnector"
    with pytest.raises(ConfigError, match="a pull and a push never meet"):
        validate_document(data)


def test_a_push_with_several_replicas_is_refused() -> None:
    data = document("local-gpu-llama-8b-push.yaml")
    data["pd"]["decode"]["replicas"] = 2
    with pytest.raises(ConfigError, match="one replica a side"):
        validate_document(data)


def test_stream_batching_is_rendered_per_deployment() -> None:
    data = document("local-gpu-llama-8b.yaml")
    data["pd"]["decode"]["stream_batching_interval_ms"] = 50
    pd = render_serve_config(validate_document(data))["applications"][0]["args"]
    assert pd["decode_config"]["experimental_configs"] == {"stream_batching_interval_ms": 50}
    assert "experimental_configs" not in pd["prefill_config"]
