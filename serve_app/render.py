"""Render a serving config into Ray Serve's own documents: one source of truth, no drift.

The rendered applications use Ray Serve LLM's stock builders (``ray.serve.llm:build_pd_openai_app``
and ``ray.serve.llm:build_openai_app``) with fully expanded arguments, so a stock Ray LLM image runs
them with no handler class and no project code installed::

    cfg = load_serving_config("examples/serving/qwen3.5-9b-g6.yaml")
    render_serve_config(cfg)                  # {"applications": [...], "http_options": ...}
    render_rayservice_serve_config_v2(cfg)    # the YAML string for RayService spec.serveConfigV2

Nothing here imports Ray: rendering works wherever the config loads.
"""

from __future__ import annotations

from typing import Any

import yaml

from serve_app.checks import model_source, replica_env
from serve_app.config import (
    ColocatedPool,
    Deployment,
    PDPool,
    PDSide,
    RequestRouter,
    Scaling,
    ServingConfig,
)
from serve_app.gpu import effective_memory_utilization, gpu_env, placement_group_config
from serve_app.kv_link import pd_side_env

PD_BUILDER = "ray.serve.llm:build_pd_openai_app"
COLOCATED_BUILDER = "ray.serve.llm:build_openai_app"
# Ray Serve LLM's public router classes (ray/serve/llm/request_router.py).
REQUEST_ROUTER_CLASSES = {
    "prefix_aware": "ray.serve.llm.request_router.PrefixCacheAffinityRouter",
    "kv_aware": "ray.serve.llm.request_router.KVAwareRouter",
}


def deployment_options(scaling: Scaling) -> dict[str, Any]:
    """Ray ``@serve.deployment`` options for a replica count or autoscaling bounds."""
    options: dict[str, Any] = {}
    if scaling.replicas is not None:
        options["num_replicas"] = scaling.replicas
    if scaling.autoscaling is not None:
        options["autoscaling_config"] = scaling.autoscaling.model_dump(mode="json")
    if scaling.max_ongoing_requests is not None:
        options["max_ongoing_requests"] = scaling.max_ongoing_requests
    return options


def llm_config(
    cfg: ServingConfig, deployment: Deployment, link_env: dict[str, str] | None = None
) -> dict[str, Any]:
    """A Ray Serve LLM ``LLMConfig`` (as a plain dict) for a prefill, decode or colocated engine;
    ``link_env``: what the KV link needs (serve_app/kv_link.py), under the config's own env."""
    loading: dict[str, Any] = {
        "model_id": cfg.model.id,
        "model_source": model_source(cfg, deployment),
    }
    if cfg.model.tokenizer is not None:
        loading["tokenizer_source"] = cfg.model.tokenizer
    options = deployment_options(deployment)
    router = request_router_config(deployment.request_router)
    if router is not None:
        options["request_router_config"] = router
    config: dict[str, Any] = {
        "model_loading_config": loading,
        "engine_kwargs": _engine_kwargs(cfg, deployment),
        "deployment_config": options,
    }
    if cfg.accelerator.kind == "cpu":
        config["accelerator_config"] = {"kind": "cpu"}
    elif cfg.accelerator.type is not None:
        config["accelerator_type"] = cfg.accelerator.type
    placement = placement_group_config(deployment)
    if placement is not None:
        config["placement_group_config"] = placement
    env = {**gpu_env(deployment), **(link_env or {}), **replica_env(cfg, deployment)}
    if env:
        config["runtime_env"] = {"env_vars": env}
    experimental: dict[str, Any] = {}
    if isinstance(deployment, PDSide) and deployment.side_channel_port_base is not None:
        experimental["NIXL_SIDE_CHANNEL_PORT_BASE"] = deployment.side_channel_port_base
    if deployment.stream_batching_interval_ms is not None:
        experimental["stream_batching_interval_ms"] = deployment.stream_batching_interval_ms
    if experimental:
        config["experimental_configs"] = experimental
    return config


def request_router_config(router: RequestRouter | None) -> dict[str, Any] | None:
    """Ray Serve's ``request_router_config`` for a deployment; None keeps Ray's default router."""
    if router is None or router.kind == "default":
        return None
    kwargs = router.model_dump(include=set(RequestRouter.PREFIX_AWARE_KEYS), exclude_none=True)
    config: dict[str, Any] = {"request_router_class": REQUEST_ROUTER_CLASSES[router.kind]}
    if kwargs:
        config["request_router_kwargs"] = kwargs
    return config


def _engine_kwargs(cfg: ServingConfig, deployment: Deployment) -> dict[str, Any]:
    kwargs: dict[str, Any] = {"max_model_len": cfg.model.max_model_len, "dtype": cfg.model.dtype}
    memory = effective_memory_utilization(cfg, deployment)
    if memory is not None:
        kwargs["gpu_memory_utilization"] = memory
    kwargs.update(deployment.engine_kwargs)
    if isinstance(deployment, PDSide) and deployment.kv_transfer_config is not None:
        kwargs["kv_transfer_config"] = deployment.kv_transfer_config.model_dump(
            mode="json", exclude_none=True
        )
    return kwargs


def pd_serving_args(cfg: ServingConfig, pd: PDPool) -> dict[str, Any]:
    """The argument of ``build_pd_openai_app`` (Ray's ``PDServingArgs``)."""
    return {
        "prefill_config": llm_config(cfg, pd.prefill, pd_side_env(cfg, pd, "prefill")),
        "decode_config": llm_config(cfg, pd.decode, pd_side_env(cfg, pd, "decode")),
        "ingress_deployment_config": deployment_options(pd.ingress),
    }


def colocated_serving_args(cfg: ServingConfig, colocated: ColocatedPool) -> dict[str, Any]:
    """The argument of ``build_openai_app`` (Ray's ``LLMServingArgs``)."""
    return {"llm_configs": [llm_config(cfg, colocated)]}


def render_applications(cfg: ServingConfig) -> list[dict[str, Any]]:
    applications = []
    if cfg.pd is not None:
        applications.append(
            {
                "name": cfg.pd.app_name,
                "route_prefix": cfg.pd.route_prefix,
                "import_path": PD_BUILDER,
                "args": pd_serving_args(cfg, cfg.pd),
            }
        )
    if cfg.colocated is not None:
        applications.append(
            {
                "name": cfg.colocated.app_name,
                "route_prefix": cfg.colocated.route_prefix,
                "import_path": COLOCATED_BUILDER,
                "args": colocated_serving_args(cfg, cfg.colocated),
            }
        )
    return applications


def render_serve_config(cfg: ServingConfig) -> dict[str, Any]:
    """The Ray Serve config document that ``serve deploy`` / ``serve run`` take."""
    return {
        "proxy_location": "EveryNode",
        "http_options": {"host": cfg.serve.http_host, "port": cfg.serve.http_port},
        "applications": render_applications(cfg),
    }


def render_serve_config_yaml(cfg: ServingConfig) -> str:
    return yaml.safe_dump(render_serve_config(cfg), sort_keys=False)


def render_rayservice_serve_config_v2(cfg: ServingConfig) -> str:
    """The YAML string for a KubeRay RayService's ``spec.serveConfigV2``.

    KubeRay fronts Serve with its own Service on the head's serve port (8000), so the document is
    the Serve config with the proxy on every node listening on all interfaces.
    """
    document = render_serve_config(cfg)
    document["http_options"] = {"host": "0.0.0.0", "port": 8000}  # noqa: S104 - inside the pod
    return yaml.safe_dump(document, sort_keys=False)
