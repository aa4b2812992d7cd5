"""The GPU profile: fractions chosen and checked, rendered for Ray Serve LLM (no GPU needed)."""

from __future__ import annotations

import copy
import os
import stat
from pathlib import Path
from typing import Any

import pytest
import yaml

from serve_app.cli import _parser
from serve_app.config import ServingConfig
from serve_app.gpu import NoGPUError, detect_gpus, memory_utilization_for, pack, share_per_replica
from serve_app.loader import ConfigError, load_serving_config, parse_serving_config
from serve_app.local import DEFAULT_GPU_CONFIG, LocalStackError, _on_this_machines_gpus
from serve_app.placement import place_on_one_machine
from serve_app.render import render_serve_config
from tests.unit.serve_app.test_render import needs_ray, ray_attr

EXAMPLES = Path(__file__).parents[3] / "examples" / "serving"
ENV = {"PD_SERVE_LOCAL_DIR": "/srv/pd"}


def gpu_document() -> dict[str, Any]:
    doc: dict[str, Any] = yaml.safe_load((EXAMPLES / "local-gpu.yaml").read_text())
    doc["model"]["source"] = "/srv/pd/tiny-model"
    for name in ("prefill", "decode"):  # unshare the YAML anchor: tests change one side
        doc["pd"][name]["engine_kwargs"] = copy.deepcopy(doc["pd"][name]["engine_kwargs"])
    return doc


def error_of(document: dict[str, Any]) -> str:
    with pytest.raises(ConfigError) as caught:
        parse_serving_config(document, env={})
    return str(caught.value)


def one_machine(gpus: int) -> ServingConfig:
    return place_on_one_machine(parse_serving_config(gpu_document(), env={}), gpus)


def llm_configs(cfg: ServingConfig) -> dict[str, dict[str, Any]]:
    apps = {app["name"]: app["args"] for app in render_serve_config(cfg)["applications"]}
    return {
        "prefill": apps["pd"]["prefill_config"],
        "decode": apps["pd"]["decode_config"],
        "colocated": apps["colocated"]["llm_configs"][0],
    }


@pytest.mark.parametrize(
    ("replicas", "gpus", "share"),
    [(3, 1, 0.33), (3, 2, 0.5), (3, 3, 1.0), (3, 8, 1.0), (4, 1, 0.25), (5, 2, 0.33), (1, 1, 1.0)],
)
def test_share_per_replica(replicas: int, gpus: int, share: float) -> None:
    assert share_per_replica(replicas, gpus) == share
    assert pack([("x", share)] * replicas, gpus) is not None


def test_memory_share_leaves_headroom_within_the_fraction() -> None:
    assert memory_utilization_for(0.33) == 0.29
    assert memory_utilization_for(0.5) == 0.45
    assert memory_utilization_for(1.0) == 0.9


def test_pack_is_exact_in_hundredths_and_refuses_an_overflow() -> None:
    assert pack([("a", 0.33)] * 3, 1) is not None
    assert pack([("a", 0.34)] * 3, 1) is None
    # First-fit decreasing: 0.6 + 0.4 on one GPU, 0.6 + 0.4 on the other.
    bins = pack([("a", 0.4), ("b", 0.6), ("c", 0.4), ("d", 0.6)], 2)
    assert bins is not None
    assert sorted(sorted(f for _, f in b) for b in bins) == [[0.4, 0.6], [0.4, 0.6]]


@pytest.mark.parametrize(("gpus", "share", "memory"), [(1, 0.33, 0.29), (2, 0.5, 0.45)])
def test_too_few_gpus_share_them_with_memory_to_match(
    gpus: int, share: float, memory: float
) -> None:
    cfg = one_machine(gpus)
    assert cfg.accelerator.gpus == gpus
    for llm in llm_configs(cfg).values():
        assert llm["placement_group_config"] == {
            "bundles": [{"GPU": share, "CPU": 1}],
            "strategy": "STRICT_PACK",
        }
        env = llm["runtime_env"]["env_vars"]
        assert env["VLLM_RAY_PER_WORKER_GPUS"] == str(share)
        assert env["VLLM_USE_V2_MODEL_RUNNER"] == "0"
        assert llm["engine_kwargs"]["gpu_memory_utilization"] == memory
        assert "accelerator_config" not in llm  # GPU: Ray Serve LLM's default


def test_enough_gpus_give_each_engine_a_whole_one() -> None:
    for llm in llm_configs(one_machine(3)).values():
        assert llm["placement_group_config"]["bundles"] == [{"GPU": 1.0, "CPU": 1}]
        assert "gpu_memory_utilization" not in llm["engine_kwargs"]  # vLLM's own 0.9


def test_gpu_profile_keeps_nixl_kv_buffers_on_the_gpu() -> None:
    configs = llm_configs(one_machine(1))
    for side in ("prefill", "decode"):
        kv = configs[side]["engine_kwargs"]["kv_transfer_config"]
        assert (kv["kv_buffer_device"], kv["kv_connector_extra_config"]) == (
            "cuda",
            {"backends": ["UCX"]},
        )
    assert configs["decode"]["runtime_env"]["env_vars"]["VLLM_LOGGING_LEVEL"] == "DEBUG"


def test_a_chosen_fraction_is_kept_and_the_rest_share_what_is_left() -> None:
    doc = gpu_document()
    doc["colocated"].update(gpu_fraction=0.5, gpu_memory_utilization=0.4)
    cfg = place_on_one_machine(parse_serving_config(doc, env={}), 2)
    assert cfg.colocated is not None and cfg.pd is not None
    assert (cfg.colocated.gpu_fraction, cfg.colocated.gpu_memory_utilization) == (0.5, 0.4)
    # 1.5 GPUs left: two whole ones do not fit, two halves do.
    assert cfg.pd.prefill.gpu_fraction == cfg.pd.decode.gpu_fraction == 0.5
    assert cfg.pd.prefill.gpu_memory_utilization == 0.45


def test_fractions_that_do_not_fit_are_a_clear_error() -> None:
    doc = gpu_document()
    doc["accelerator"]["gpus"] = 1
    for section in (doc["pd"]["prefill"], doc["pd"]["decode"], doc["colocated"]):
        section.update(gpu_fraction=0.4, gpu_memory_utilization=0.35)
    message = error_of(doc)
    assert message.startswith("accelerator.gpus: the engine replicas' GPU shares")
    assert "pd.prefill 0.4, pd.decode 0.4, colocated 0.4; 1.2 in all" in message
    assert "do not fit on 1 GPU(s)" in message


def test_replicas_and_autoscaling_bounds_count_towards_the_fit() -> None:
    doc = gpu_document()
    doc["accelerator"]["gpus"] = 1
    for section in (doc["pd"]["prefill"], doc["pd"]["decode"]):
        section.update(gpu_fraction=0.25, gpu_memory_utilization=0.2)
    doc["colocated"].pop("replicas")
    doc["colocated"].update(
        gpu_fraction=0.25,
        gpu_memory_utilization=0.2,
        autoscaling={"min_replicas": 1, "max_replicas": 2},
    )
    parse_serving_config(doc, env={})  # 4 x 0.25 fits
    doc["pd"]["decode"]["replicas"] = 2
    assert "do not fit on 1 GPU(s)" in error_of(doc)


def test_memory_share_above_the_fraction_is_refused() -> None:
    doc = gpu_document()
    doc["pd"]["decode"].update(gpu_fraction=0.3, gpu_memory_utilization=0.5)
    assert "pd.decode.gpu_memory_utilization: 0.5 is more than its gpu_fraction 0.3" in error_of(
        doc
    )


def test_a_fraction_without_a_memory_share_names_vllms_default() -> None:
    doc = gpu_document()
    doc["colocated"]["gpu_fraction"] = 0.5
    assert "colocated.gpu_memory_utilization: vLLM's default 0.9 is more than" in error_of(doc)


def test_model_wide_memory_share_counts_against_each_fraction() -> None:
    doc = gpu_document()
    doc["model"]["gpu_memory_utilization"] = 0.9
    doc["colocated"]["gpu_fraction"] = 0.5
    assert "colocated.gpu_memory_utilization: 0.9 is more than its gpu_fraction 0.5" in error_of(
        doc
    )


def test_a_fraction_with_several_workers_is_refused() -> None:
    doc = gpu_document()
    doc["pd"]["prefill"]["engine_kwargs"]["tensor_parallel_size"] = 2
    doc["pd"]["prefill"].update(gpu_fraction=0.5, gpu_memory_utilization=0.45)
    assert "pd.prefill.engine_kwargs.tensor_parallel_size: a gpu_fraction is" in error_of(doc)


def test_per_worker_gpus_set_by_hand_must_match_the_fraction() -> None:
    doc = gpu_document()
    doc["pd"]["decode"].update(gpu_fraction=0.5, gpu_memory_utilization=0.45)
    doc["pd"]["decode"]["env"]["VLLM_RAY_PER_WORKER_GPUS"] = "1"
    assert "pd.decode.env.VLLM_RAY_PER_WORKER_GPUS: 1 differs from gpu_fraction 0.5" in error_of(
        doc
    )


def test_gpu_keys_on_a_cpu_config_are_refused() -> None:
    doc: dict[str, Any] = yaml.safe_load((EXAMPLES / "local-cpu.yaml").read_text())
    doc["model"]["source"] = "/srv/pd/tiny-model"
    doc["accelerator"]["gpus"] = 1
    assert "accelerator.gpus: a GPU count needs kind: gpu" in error_of(doc)
    del doc["accelerator"]["gpus"]
    doc["colocated"]["gpu_fraction"] = 0.5
    assert "colocated.gpu_fraction: not used with accelerator.kind cpu" in error_of(doc)


def test_gpu_memory_utilization_in_engine_kwargs_points_to_both_places() -> None:
    doc = gpu_document()
    doc["colocated"]["engine_kwargs"] = {"gpu_memory_utilization": 0.3}
    message = error_of(doc)
    assert "colocated.engine_kwargs.gpu_memory_utilization: set it as model." in message
    assert "gpu_memory_utilization beside engine_kwargs" in message


def test_production_example_renders_as_before_whole_gpus_no_placement() -> None:
    cfg = load_serving_config(EXAMPLES / "qwen3.5-9b-g6.yaml", env=ENV)
    for llm in llm_configs(cfg).values():
        assert "placement_group_config" not in llm
        assert "VLLM_RAY_PER_WORKER_GPUS" not in llm["runtime_env"]["env_vars"]


def test_detect_gpus_honours_cuda_visible_devices() -> None:
    assert detect_gpus({"CUDA_VISIBLE_DEVICES": "0,1"}) == 2
    with pytest.raises(NoGPUError, match="hides every GPU"):
        detect_gpus({"CUDA_VISIBLE_DEVICES": "-1"})


def _fake_nvidia_smi(folder: Path, listing: str) -> dict[str, str]:
    script = folder / "nvidia-smi"
    script.write_text(f"#!/bin/sh\nprintf '{listing}'\n")
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    return {"PATH": f"{folder}{os.pathsep}{os.environ['PATH']}"}


def test_detect_gpus_counts_nvidia_smis_listing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    listing = "GPU 0: NVIDIA H200 (UUID: a)\\nGPU 1: NVIDIA H200 (UUID: b)\\n"
    env = _fake_nvidia_smi(tmp_path, listing)
    monkeypatch.setenv("PATH", env["PATH"])
    assert detect_gpus({}) == 2


def test_detect_gpus_without_nvidia_smi(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(NoGPUError, match="no nvidia-smi on PATH"):
        detect_gpus({})


def test_local_profile_on_a_machine_without_gpus_says_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    cfg = load_serving_config(DEFAULT_GPU_CONFIG, env=ENV)
    with pytest.raises(LocalStackError, match=r"accelerator\.kind gpu: no nvidia-smi"):
        _on_this_machines_gpus(cfg)


def test_local_profile_keeps_the_placement_the_config_names(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))  # no nvidia-smi: the config's count is used
    doc = gpu_document()
    doc["accelerator"]["gpus"] = 1
    for section in (doc["pd"]["prefill"], doc["pd"]["decode"], doc["colocated"]):
        section.update(gpu_fraction=0.3, gpu_memory_utilization=0.25)
    cfg = _on_this_machines_gpus(parse_serving_config(doc, env={}))
    assert cfg.pd is not None and cfg.pd.prefill.gpu_fraction == 0.3


def test_a_gpu_count_without_fractions_counts_whole_gpus() -> None:
    doc = gpu_document()
    doc["accelerator"]["gpus"] = 2
    assert "(pd.prefill 1, pd.decode 1, colocated 1; 3 in all) do not fit on 2" in error_of(doc)


def test_local_up_gpu_flag_and_config_are_exclusive(capsys: pytest.CaptureFixture[str]) -> None:
    assert _parser().parse_args(["local", "up", "--gpu"]).gpu is True
    with pytest.raises(SystemExit):
        _parser().parse_args(["local", "up", "--gpu", "--config", "x.yaml"])
    assert "not allowed with argument" in capsys.readouterr().err


@needs_ray
def test_rendered_gpu_profile_loads_into_rays_llm_config() -> None:
    PDServingArgs = ray_attr(
        "ray.llm._internal.serve.serving_patterns.prefill_decode.builder", "PDServingArgs"
    )
    LLMServingArgs = ray_attr("ray.serve.llm", "LLMServingArgs")
    apps = {a["name"]: a["args"] for a in render_serve_config(one_machine(1))["applications"]}
    pd_args = PDServingArgs.model_validate(apps["pd"])
    bundles = pd_args.decode_config.placement_group_config["bundles"]
    assert bundles == [{"GPU": 0.33, "CPU": 1}]
    colocated = LLMServingArgs.model_validate(apps["colocated"]).llm_configs[0]
    assert colocated.placement_group_config["strategy"] == "STRICT_PACK"
