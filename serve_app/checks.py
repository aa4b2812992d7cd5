"""Cross-key checks of a serving config: the mistakes that deploy fine and then break silently.

Each check returns lines ``<key path>: <what is wrong and what to do>``; the config model raises
them all at once, so a user fixes every problem in one pass. The per-key rules (types, unknown
keys, ranges) live on the models in :mod:`serve_app.config`.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from serve_app.config import deployments
from serve_app.gpu import PER_WORKER_GPUS_ENV, effective_memory_utilization, gpu_demands, pack
from serve_app.kv_link import check_link, check_push

if TYPE_CHECKING:
    from serve_app.config import Deployment, PDPool, PDSide, RequestRouter, ServingConfig

# Engine arguments the config names itself; a second spelling in engine_kwargs would be ambiguous.
_OWN_ENGINE_KEYS: Mapping[str, str] = {
    "model": "model.source (or model_source on the deployment)",
    "tokenizer": "model.tokenizer",
    "served_model_name": "model.id",
    "max_model_len": "model.max_model_len",
    "dtype": "model.dtype",
    "gpu_memory_utilization": "model.gpu_memory_utilization (or gpu_memory_utilization beside "
    "engine_kwargs)",
    "kv_transfer_config": "kv_transfer_config beside engine_kwargs (PD sides only)",
}

# Hybrid (attention + state-space) models whose NIXL transfer needs extra engine environment:
# vLLM must lay the SSM conv state out the way the NIXL connector moves it.
_HYBRID_MODEL_TYPES = frozenset({"qwen3_5", "qwen3_5_moe", "qwen3_next"})
_HYBRID_NAME = re.compile(r"qwen3\.5|qwen3-next", re.IGNORECASE)
HYBRID_NIXL_ENV: Mapping[str, str] = {"VLLM_SSM_CONV_STATE_LAYOUT": "DS"}

EFA_ENV: Mapping[str, str] = {"FI_PROVIDER": "efa"}


def check_serving_config(cfg: ServingConfig) -> list[str]:
    problems = list(_check_pools_present(cfg))
    problems += _check_model(cfg)
    for path, deployment in deployments(cfg):
        problems += _check_engine_kwargs(path, deployment)
        problems += _check_request_router(cfg, path, deployment)
    if cfg.pd is not None:
        problems += _check_pd(cfg, cfg.pd)
    problems += check_gpu_placement(cfg)
    return problems


def replica_env(cfg: ServingConfig, deployment: Deployment) -> dict[str, str]:
    """The environment a deployment's replicas get: the config's ``env``, then its own."""
    return {**cfg.env, **deployment.env}


def model_source(cfg: ServingConfig, deployment: Deployment) -> str:
    return getattr(deployment, "model_source", None) or cfg.model.source


def _check_pools_present(cfg: ServingConfig) -> Iterator[str]:
    if cfg.pd is None and cfg.colocated is None:
        yield "pd: neither pd nor colocated is configured; nothing would be served"
    if cfg.pd is not None and cfg.colocated is not None:
        if cfg.pd.app_name == cfg.colocated.app_name:
            yield f"colocated.app_name: {cfg.colocated.app_name!r} is also pd.app_name"
        if cfg.pd.route_prefix == cfg.colocated.route_prefix:
            yield f"colocated.route_prefix: {cfg.colocated.route_prefix!r} is also pd's"


def _check_model(cfg: ServingConfig) -> Iterator[str]:
    if cfg.accelerator.kind == "cpu" and cfg.model.gpu_memory_utilization is not None:
        yield "model.gpu_memory_utilization: not used with accelerator.kind cpu; remove it"
    if cfg.model.local_shape != "tiny":
        # A shape is a config.json without weights: vLLM would look for safetensors and fail.
        for path, deployment in deployments(cfg):
            if deployment.engine_kwargs.get("load_format") != "dummy":
                yield (
                    f"{path}.engine_kwargs.load_format: model.local_shape "
                    f"{cfg.model.local_shape} has no weights; set load_format: dummy"
                )


def _check_engine_kwargs(path: str, deployment: Deployment) -> Iterator[str]:
    for key in deployment.engine_kwargs:
        if key in _OWN_ENGINE_KEYS:
            yield f"{path}.engine_kwargs.{key}: set it as {_OWN_ENGINE_KEYS[key]}"


def _check_request_router(cfg: ServingConfig, path: str, deployment: Deployment) -> Iterator[str]:
    router = deployment.request_router
    if router is None:
        return
    where = f"{path}.request_router"
    if router.kind != "prefix_aware":
        for key in router.PREFIX_AWARE_KEYS:
            if getattr(router, key) is not None:
                yield f"{where}.{key}: only kind prefix_aware reads it (kind is {router.kind})"
    if router.kind != "default" and deployment.engine_kwargs.get("enable_prefix_caching") is False:
        yield (
            f"{where}.kind: {router.kind} routes by what each replica's prefix cache holds, but "
            f"{path}.engine_kwargs.enable_prefix_caching is false; turn caching on or use default"
        )
    yield from _check_eviction(where, router)
    if router.kind == "kv_aware":
        yield from _check_kv_aware(cfg, where, path)


def _check_eviction(where: str, router: RequestRouter) -> Iterator[str]:
    eviction = ("eviction_threshold_chars", "eviction_target_chars", "eviction_interval_secs")
    if not router.do_eviction:
        for key in eviction:
            if getattr(router, key) is not None:
                yield f"{where}.{key}: has no effect without do_eviction: true"
    threshold, target = router.eviction_threshold_chars, router.eviction_target_chars
    if threshold is not None and target is not None and target > threshold:
        yield f"{where}.eviction_target_chars: above eviction_threshold_chars ({threshold})"


def _check_kv_aware(cfg: ServingConfig, where: str, path: str) -> Iterator[str]:
    if path != "colocated":
        # Ray Serve LLM 2.60 builds the KV scorer only in build_openai_app's direct-streaming
        # ingress; elsewhere KVAwareRouter silently degrades to a random replica.
        yield (
            f"{where}.kind: kv_aware scores replicas only in a colocated pool (Ray Serve LLM's "
            "direct-streaming ingress); use prefix_aware here"
        )
    if cfg.accelerator.kind == "cpu":
        yield (
            f"{where}.kind: kv_aware needs ai-dynamo's selection service, which the CPU stack "
            "does not install; use prefix_aware"
        )


def _check_pd(cfg: ServingConfig, pd: PDPool) -> Iterator[str]:
    sides = {"prefill": pd.prefill, "decode": pd.decode}
    for name, side in sides.items():
        if side.kv_transfer_config is None:
            yield (
                f"pd.{name}.kv_transfer_config: missing; without it no KV cache moves "
                "between prefill and decode (Ray Serve LLM refuses the PD app)"
            )
    yield from _check_same_model(cfg, pd)
    yield from _check_hybrid_env(cfg, pd)
    if pd.prefill.side_channel_port_base is not None and (
        pd.prefill.side_channel_port_base == pd.decode.side_channel_port_base
    ):
        yield (
            "pd.decode.side_channel_port_base: equal to prefill's; replicas of both sides on "
            "one node would bind the same NIXL side-channel ports"
        )
    if pd.prefill.kv_transfer_config is None or pd.decode.kv_transfer_config is None:
        return
    for name, side in sides.items():
        yield from _check_kv_side(cfg, f"pd.{name}", name, side)
    yield from _check_kv_pair(pd)
    yield from check_link(cfg, pd, {name: replica_env(cfg, side) for name, side in sides.items()})
    yield from check_push(pd)


def _check_same_model(cfg: ServingConfig, pd: PDPool) -> Iterator[str]:
    prefill, decode = model_source(cfg, pd.prefill), model_source(cfg, pd.decode)
    if prefill != decode:
        yield (
            f"pd.decode.model_source: decode serves {decode!r} but prefill serves {prefill!r}; "
            "both sides must load the same weights (one model's KV cache is garbage to another)"
        )


def _check_hybrid_env(cfg: ServingConfig, pd: PDPool) -> Iterator[str]:
    if not is_hybrid_model(model_source(cfg, pd.prefill)):
        return
    for name, side in (("prefill", pd.prefill), ("decode", pd.decode)):
        env = replica_env(cfg, side)
        for var, value in HYBRID_NIXL_ENV.items():
            if env.get(var) != value:
                yield (
                    f"pd.{name}.env.{var}: {cfg.model.source!r} is a hybrid model; NIXL moves "
                    f"its state correctly only with {var}={value} (set it in env or pd.{name}.env)"
                )


def is_hybrid_model(source: str) -> bool:
    """A hybrid attention/state-space model, by name or by a local folder's ``config.json``."""
    if _HYBRID_NAME.search(source):
        return True
    config_file = Path(source) / "config.json"
    if not config_file.is_file():
        return False
    try:
        hf_config = json.loads(config_file.read_text())
    except (OSError, ValueError):
        return False
    text_config = hf_config.get("text_config") or {}
    return bool({hf_config.get("model_type"), text_config.get("model_type")} & _HYBRID_MODEL_TYPES)


def _check_kv_side(cfg: ServingConfig, path: str, name: str, side: PDSide) -> Iterator[str]:
    kv = side.kv_transfer_config
    assert kv is not None  # checked by the caller
    wrong_role = {"prefill": "kv_consumer", "decode": "kv_producer"}[name]
    if kv.kv_role == wrong_role:
        yield f"{path}.kv_transfer_config.kv_role: {wrong_role} cannot serve the {name} side"
    if cfg.accelerator.kind == "cpu" and kv.kv_buffer_device != "cpu":
        yield f"{path}.kv_transfer_config.kv_buffer_device: must be cpu on accelerator.kind cpu"
    if "LIBFABRIC" in kv.kv_connector_extra_config.backends:
        env = replica_env(cfg, side)
        for var, value in EFA_ENV.items():
            if env.get(var) != value:
                yield (
                    f"{path}.env.{var}: backend LIBFABRIC needs {var}={value} in the replica "
                    f"environment (env or {path}.env); without it libfabric does not use EFA"
                )


def _check_kv_pair(pd: PDPool) -> Iterator[str]:
    prefill, decode = pd.prefill.kv_transfer_config, pd.decode.kv_transfer_config
    assert prefill is not None and decode is not None  # checked by the caller
    if prefill.engine_id is not None and prefill.engine_id == decode.engine_id:
        yield (
            f"pd.decode.kv_transfer_config.engine_id: {decode.engine_id!r} is also prefill's; "
            "each side needs its own engine id"
        )
    prefill_backends = prefill.kv_connector_extra_config.backends
    decode_backends = decode.kv_connector_extra_config.backends
    if prefill_backends != decode_backends:
        yield (
            "pd.decode.kv_transfer_config.kv_connector_extra_config.backends: "
            f"{list(decode_backends)} differs from prefill's {list(prefill_backends)}"
        )
    if prefill.kv_buffer_device != decode.kv_buffer_device:
        yield "pd.decode.kv_transfer_config.kv_buffer_device: differs from prefill's"


def check_gpu_placement(cfg: ServingConfig) -> list[str]:
    """GPU fractions and memory shares that Ray or vLLM would refuse, or that would not fit."""

    problems: list[str] = []
    for path, deployment in deployments(cfg):
        fraction = deployment.gpu_fraction
        if cfg.accelerator.kind == "cpu":
            for key in ("gpu_fraction", "gpu_memory_utilization"):
                if getattr(deployment, key) is not None:
                    problems.append(f"{path}.{key}: not used with accelerator.kind cpu; remove it")
            continue
        if fraction is None or fraction == 1:
            continue
        memory = effective_memory_utilization(cfg, deployment)
        if memory is None or memory > fraction:
            shown = "vLLM's default 0.9" if memory is None else memory
            problems.append(
                f"{path}.gpu_memory_utilization: {shown} is more than its gpu_fraction "
                f"{fraction}; engines sharing the GPU would run out of memory (set it at most "
                f"{fraction}, a little below leaves room for the CUDA context)"
            )
        for key in ("tensor_parallel_size", "pipeline_parallel_size"):
            if int(deployment.engine_kwargs.get(key, 1)) > 1:
                problems.append(
                    f"{path}.engine_kwargs.{key}: a gpu_fraction is one worker's share of one "
                    "GPU; several workers need whole GPUs (remove gpu_fraction)"
                )
        pinned = replica_env(cfg, deployment).get(PER_WORKER_GPUS_ENV)
        if pinned is not None and pinned != str(fraction):
            problems.append(
                f"{path}.env.{PER_WORKER_GPUS_ENV}: {pinned} differs from gpu_fraction "
                f"{fraction} (vLLM's worker would ask Ray for more than its bundle holds); "
                "remove it, it is set from gpu_fraction"
            )
    gpus = cfg.accelerator.gpus
    if gpus is not None and not problems:
        demands = list(gpu_demands(cfg))
        if pack(demands, gpus) is None:
            listed = ", ".join(f"{path} {fraction:g}" for path, fraction in demands)
            problems.append(
                f"accelerator.gpus: the engine replicas' GPU shares ({listed}; "
                f"{sum(f for _, f in demands):g} in all) do not fit on {gpus} GPU(s); lower "
                "gpu_fraction (and gpu_memory_utilization with it) or the replica counts"
            )
    return problems
