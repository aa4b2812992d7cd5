"""The gateway's ConfigMap in every overlay is a config the gateway accepts (its parser is strict),
its secrets all come from the Deployment's environment, and its pools point at the RayServices'
Serve services and the models they serve."""

from __future__ import annotations

import re
from typing import Any
from urllib.parse import urlsplit

import pytest
import yaml

from gateway.config import GatewayConfig, parse_config
from tests.deploy.k8s_render import by_kind, one, overlay_names

Rendered = dict[str, list[dict[str, Any]]]
ENV_REF = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)")


def gateway_document(docs: list[dict[str, Any]]) -> Any:
    (config_map,) = by_kind(docs, "ConfigMap")
    return yaml.safe_load(config_map["data"]["gateway.yaml"])


def deployment_env_names(docs: list[dict[str, Any]]) -> set[str]:
    deployment = one(docs, "Deployment", "pd-gateway")
    return {e["name"] for e in deployment["spec"]["template"]["spec"]["containers"][0]["env"]}


def parsed(docs: list[dict[str, Any]]) -> GatewayConfig:
    # Dummy values stand in for the Secret's: the parser needs every ${VAR} it meets to be set.
    env = {name: f"dummy-{name.lower()}" for name in deployment_env_names(docs)}
    return parse_config(gateway_document(docs), env)


@pytest.mark.parametrize("overlay", overlay_names())
def test_gateway_config_parses(rendered: Rendered, overlay: str) -> None:
    config = parsed(rendered[overlay])
    assert config.server.host == "0.0.0.0"
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
    config = parsed(docs)
    served: dict[str, set[str]] = {}
    for rayservice in by_kind(docs, "RayService"):
        meta = rayservice["metadata"]
        host = f"{meta['name']}-serve-svc.{meta['namespace']}.svc:8000"
        for app in yaml.safe_load(rayservice["spec"]["serveConfigV2"])["applications"]:
            served[f"http://{host}{app['route_prefix']}"] = model_ids(app)
    for name, pool in config.pools.items():
        for url in pool.urls:
            assert url in served, f"pool {name}: {url} is no RayService's Serve app"
            assert urlsplit(url).scheme == "http"
    for name, model in config.models.items():
        upstream = model.upstream_model or name
        urls = config.pools[model.pool].urls
        assert all(upstream in served[url] for url in urls), f"model {name}: not served there"


def strings(value: Any) -> list[str]:
    """Every string value in a parsed YAML document (comments are gone by then)."""
    if isinstance(value, dict):
        return [s for v in value.values() for s in strings(v)]
    if isinstance(value, list):
        return [s for v in value for s in strings(v)]
    return [value] if isinstance(value, str) else []


def model_ids(app: dict[str, Any]) -> set[str]:
    args = app["args"]
    configs = args.get("llm_configs") or [args["prefill_config"], args["decode_config"]]
    return {c["model_loading_config"]["model_id"] for c in configs}
