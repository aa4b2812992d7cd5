"""The gateway's ConfigMap in every overlay is a config the gateway accepts (its parser is strict),
its secrets all come from the Deployment's environment, and its pools point at the RayServices'
Serve services and the models they serve."""

from __future__ import annotations

import re
from typing import Any

import pytest
import yaml

from gateway.config import GatewayConfig, parse_config
from serve_app.render import COLOCATED_BUILDER, PD_BUILDER
from tests.deploy.k8s_policy import engine_configs
from tests.deploy.k8s_render import by_kind, one, overlay_names

Rendered = dict[str, list[dict[str, Any]]]
ENV_REF = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)")


def gateway_document(docs: list[dict[str, Any]]) -> Any:
    (config_map,) = [
        c for c in by_kind(docs, "ConfigMap") if c["metadata"]["namespace"] == "pd-gateway"
    ]
    return yaml.safe_load(config_map["data"]["gateway.yaml"])


def deployment_env_names(docs: list[dict[str, Any]]) -> set[str]:
    """The environment variables the gateway's container gets from Secrets."""
    deployment = one(docs, "Deployment", "pd-gateway")
    env = deployment["spec"]["template"]["spec"]["containers"][0]["env"]
    return {e["name"] for e in env if "secretKeyRef" in e.get("valueFrom", {})}


# Stand-ins for the Secret's values, of the shape each one has (the parser checks URLs).
SECRET_STAND_INS = {
    "DATABASE_URL": "postgresql://pdgateway:password@db.example.internal:5432/pdgateway",
    "PD_GATEWAY_KEY_HASH_SECRET": "0123456789abcdef0123456789abcdef",
    "REDIS_URL": "redis://redis.pd-gateway.svc:6379/0",
    "PD_GATEWAY_METRICS_TOKEN": "fedcba9876543210fedcba9876543210",
}


def stand_in_env(docs: list[dict[str, Any]]) -> dict[str, str]:
    names = deployment_env_names(docs)
    assert names <= SECRET_STAND_INS.keys(), f"no stand-in for {names - SECRET_STAND_INS.keys()}"
    return {name: SECRET_STAND_INS[name] for name in names}


def parsed(docs: list[dict[str, Any]]) -> GatewayConfig:
    # The parser needs every ${VAR} it meets to be set: stand-ins play the Secret's part.
    return parse_config(gateway_document(docs), stand_in_env(docs))


@pytest.mark.parametrize("overlay", overlay_names())
def test_gateway_config_parses(rendered: Rendered, overlay: str) -> None:
    config = parsed(rendered[overlay])
    assert config.server.host == "0.0.0.0"
    # Shared state for many replicas: PostgreSQL and Redis, both from the Secret.
    assert config.storage.url == SECRET_STAND_INS["DATABASE_URL"]
    assert config.limits.backend == "redis"
    assert config.limits.redis_url == SECRET_STAND_INS["REDIS_URL"]
    assert config.auth.hash_secret is not None
    assert (
        config.auth.hash_secret.get_secret_value() == SECRET_STAND_INS["PD_GATEWAY_KEY_HASH_SECRET"]
    )
    # /metrics is private: read with the scrape token from the Secret, never public.
    assert not config.auth.public_metrics and config.auth.metrics_token is not None
    assert (
        config.auth.metrics_token.get_secret_value() == SECRET_STAND_INS["PD_GATEWAY_METRICS_TOKEN"]
    )
    deployment = one(rendered[overlay], "Deployment", "pd-gateway")
    ports = deployment["spec"]["template"]["spec"]["containers"][0]["ports"]
    assert [p["containerPort"] for p in ports] == [config.server.port]


@pytest.mark.parametrize("overlay", overlay_names())
def test_every_env_reference_is_provided(rendered: Rendered, overlay: str) -> None:
    referenced = set(ENV_REF.findall(" ".join(strings(gateway_document(rendered[overlay])))))
    assert referenced <= deployment_env_names(rendered[overlay])


@pytest.mark.parametrize("overlay", overlay_names())
def test_pools_point_at_the_serve_services_and_their_models(
    rendered: Rendered, overlay: str
) -> None:
    docs = rendered[overlay]
    assert route_problems(parsed(docs), serve_apps(docs)) == []


def test_route_check_catches_a_wrong_url_and_a_wrong_model(rendered: Rendered) -> None:
    docs = rendered["eks-g6"]
    document = gateway_document(docs)
    env = stand_in_env(docs)
    document["pools"]["colocated"]["urls"] = ["http://colocated-serve-svc.ray.svc:8000/pd"]
    (model,) = document["models"].values()
    model["upstream_model"] = "Qwen/Qwen3.5-9B-Instruct"
    problems = route_problems(parse_config(document, env), serve_apps(docs))
    assert any("colocated" in p for p in problems)
    assert any("Qwen3.5-9B-Instruct" in p for p in problems)


def route_problems(config: GatewayConfig, apps: dict[str, dict[str, Any]]) -> list[str]:
    problems = [
        f"pool {name}: {url} is no RayService's Serve app"
        for name, pool in config.pools.items()
        for url in pool.urls
        if url not in apps
    ]
    for model_name, model in config.models.items():
        for pool_name, role, upstream in model_routes(model_name, model):
            for url in config.pools[pool_name].urls:
                if url not in apps:
                    continue
                if upstream not in model_ids(apps[url]):
                    problems.append(f"model {model_name}: {upstream} is not served at {url}")
                if role is not None and apps[url]["import_path"] != BUILDERS[role]:
                    problems.append(f"model {model_name}: {url} is not a {role} app")
    return problems


# What each pool role must be built with (serve_app.render's stock Ray Serve LLM builders).
BUILDERS = {"pd": PD_BUILDER, "colocated": COLOCATED_BUILDER}


def serve_apps(docs: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Serve application by the in-cluster URL the gateway reaches it at: KubeRay's
    <rayservice>-serve-svc Service, Serve's port, the app's route prefix."""
    apps = {}
    for rayservice in by_kind(docs, "RayService"):
        meta = rayservice["metadata"]
        host = f"{meta['name']}-serve-svc.{meta['namespace']}.svc:8000"
        for app in yaml.safe_load(rayservice["spec"]["serveConfigV2"])["applications"]:
            apps[f"http://{host}{app['route_prefix']}"] = app
    return apps


def model_routes(name: str, model: Any) -> list[tuple[str, str | None, str]]:
    """(pool, role or None, upstream model name) for every way a gateway model reaches a pool:
    its single ``pool``, or each variant's PD and colocated pools."""
    if model.pool is not None:
        return [(model.pool, None, model.upstream_model or name)]
    routes = []
    for variant in (getattr(model, "variants", None) or {}).values():
        upstream = variant.upstream_model or model.upstream_model or name
        for role in ("pd", "colocated"):
            pool = getattr(variant.pools, role)
            if pool is not None:
                routes.append((pool, role, upstream))
    return routes


def strings(value: Any) -> list[str]:
    """Every string value in a parsed YAML document (comments are gone by then)."""
    if isinstance(value, dict):
        return [s for v in value.values() for s in strings(v)]
    if isinstance(value, list):
        return [s for v in value for s in strings(v)]
    return [value] if isinstance(value, str) else []


def model_ids(app: dict[str, Any]) -> set[str]:
    return {c["model_loading_config"]["model_id"] for c in engine_configs(app)}
