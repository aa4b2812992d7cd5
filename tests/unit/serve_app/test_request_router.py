"""Per-deployment request routers: validated, rendered into Ray Serve's request_router_config."""

from __future__ import annotations

import copy
import importlib.util
import inspect
from typing import Any

import pytest

from serve_app.loader import parse_serving_config
from serve_app.render import REQUEST_ROUTER_CLASSES, render_applications
from tests.unit.serve_app.test_config import error_of, production

needs_ray = pytest.mark.skipif(
    importlib.util.find_spec("ray") is None, reason="ray is not installed (serve-cpu extra)"
)


def with_router(pool: str, router: dict[str, Any], **engine: Any) -> dict[str, Any]:
    doc = production()
    target = doc["colocated"] if pool == "colocated" else doc["pd"][pool]
    target["request_router"] = router
    if engine:
        target["engine_kwargs"] = {**target.get("engine_kwargs", {}), **engine}
    return doc


def colocated_llm_config(doc: dict[str, Any]) -> dict[str, Any]:
    apps = {a["name"]: a for a in render_applications(parse_serving_config(doc, env={}))}
    config: dict[str, Any] = apps["colocated"]["args"]["llm_configs"][0]
    return config


def test_prefix_aware_router_renders_rays_class_and_only_the_thresholds_set() -> None:
    doc = with_router("colocated", {"kind": "prefix_aware", "imbalanced_threshold": 4})
    options = colocated_llm_config(doc)["deployment_config"]
    assert options["request_router_config"] == {
        "request_router_class": "ray.serve.llm.request_router.PrefixCacheAffinityRouter",
        "request_router_kwargs": {"imbalanced_threshold": 4.0},
    }
    # Autoscaling and the router sit side by side in the deployment options.
    assert options["autoscaling_config"]["max_replicas"] == 2


@pytest.mark.parametrize("router", [None, {"kind": "default"}])
def test_default_router_renders_nothing(router: dict[str, Any] | None) -> None:
    doc = production() if router is None else with_router("colocated", router)
    assert "request_router_config" not in colocated_llm_config(doc)["deployment_config"]


def test_pd_sides_take_their_own_router() -> None:
    doc = with_router("decode", {"kind": "prefix_aware"})
    apps = {a["name"]: a for a in render_applications(parse_serving_config(doc, env={}))}
    args = apps["pd"]["args"]
    assert "request_router_config" in args["decode_config"]["deployment_config"]
    assert "request_router_config" not in args["prefill_config"]["deployment_config"]


@pytest.mark.parametrize(
    ("pool", "router", "engine", "expected"),
    [
        (
            "colocated",
            {"kind": "round_robin"},
            {},
            "colocated.request_router.kind: input should be",
        ),
        ("colocated", {"kind": "prefix_aware", "match_rate": 0.5}, {}, "did you mean"),
        (
            "colocated",
            {"kind": "prefix_aware", "match_rate_threshold": 1.5},
            {},
            "match_rate_threshold: input should be less than or equal to 1",
        ),
        (
            "decode",
            {"kind": "prefix_aware"},
            {"enable_prefix_caching": False},
            "pd.decode.request_router.kind: prefix_aware routes by what each replica's",
        ),
        (
            "colocated",
            {"kind": "default", "imbalanced_threshold": 2},
            {},
            "colocated.request_router.imbalanced_threshold: only kind prefix_aware reads it",
        ),
        (
            "colocated",
            {"kind": "prefix_aware", "eviction_threshold_chars": 1000},
            {},
            "eviction_threshold_chars: has no effect without do_eviction: true",
        ),
        (
            "colocated",
            {
                "kind": "prefix_aware",
                "do_eviction": True,
                "eviction_threshold_chars": 1000,
                "eviction_target_chars": 2000,
            },
            {},
            "eviction_target_chars: above eviction_threshold_chars (1000)",
        ),
        ("prefill", {"kind": "kv_aware"}, {}, "pd.prefill.request_router.kind: kv_aware scores"),
    ],
)
def test_router_mistakes_name_their_key(
    pool: str, router: dict[str, Any], engine: dict[str, Any], expected: str
) -> None:
    assert expected in error_of(with_router(pool, router, **engine))


def test_kv_aware_is_refused_on_the_cpu_stack() -> None:
    doc = with_router("colocated", {"kind": "kv_aware"})
    assert colocated_llm_config(doc)["deployment_config"]["request_router_config"] == {
        "request_router_class": "ray.serve.llm.request_router.KVAwareRouter"
    }
    cpu = copy.deepcopy(doc)
    cpu["accelerator"] = {"kind": "cpu"}
    del cpu["model"]["gpu_memory_utilization"]
    for side in ("prefill", "decode"):
        cpu["pd"][side]["kv_transfer_config"]["kv_buffer_device"] = "cpu"
    assert "kv_aware needs ai-dynamo" in error_of(cpu)


@needs_ray
@pytest.mark.parametrize("kind", sorted(REQUEST_ROUTER_CLASSES))
def test_rendered_router_loads_into_rays_own_models(kind: str) -> None:
    from ray.llm._internal.serve.core.configs.llm_config import LLMConfig
    from ray.serve.config import RequestRouterConfig

    router = (
        {"kind": kind, "match_rate_threshold": 0.2} if kind == "prefix_aware" else {"kind": kind}
    )
    llm_config = colocated_llm_config(with_router("colocated", router))
    rendered = llm_config["deployment_config"]["request_router_config"]
    config = RequestRouterConfig(**rendered)
    router_class = config.get_request_router_class()
    assert router_class.__name__ == REQUEST_ROUTER_CLASSES[kind].rsplit(".", 1)[1]
    if kind == "prefix_aware":
        # Every rendered keyword is a parameter of the router's initialize_state.
        parameters = inspect.signature(router_class.initialize_state).parameters
        assert set(config.request_router_kwargs) <= set(parameters)
    assert LLMConfig.model_validate(llm_config).deployment_config["request_router_config"]
