"""The NetworkPolicies close Ray's unauthenticated endpoints and Redis to everyone but their
clients, without cutting the gateway off from Serve or the operator from Ray."""

from __future__ import annotations

from typing import Any

import pytest
import yaml

from tests.deploy.k8s_netpol import Pod, admits
from tests.deploy.k8s_render import K8S_DIR, one, overlay_names

Rendered = dict[str, list[dict[str, Any]]]


def template_pod(doc: dict[str, Any], template: dict[str, Any]) -> Pod:
    return Pod(doc["metadata"]["namespace"], dict(template["metadata"].get("labels", {})))


def pods(docs: list[dict[str, Any]]) -> dict[str, Pod]:
    gateway = one(docs, "Deployment", "pd-gateway")
    redis = one(docs, "Deployment", "redis")
    pd = one(docs, "RayService", "pd")["spec"]["rayClusterConfig"]
    return {
        "gateway": template_pod(gateway, gateway["spec"]["template"]),
        "redis": template_pod(redis, redis["spec"]["template"]),
        "ray-head": Pod("ray", pd["headGroupSpec"]["template"]["metadata"]["labels"]),
        "ray-worker": Pod("ray", pd["workerGroupSpecs"][0]["template"]["metadata"]["labels"]),
        "operator": Pod("kuberay-system", {"app.kubernetes.io/name": "kuberay-operator"}),
        "stranger": Pod("default", {"app": "anything"}),
    }


ALLOWED = [
    ("gateway", "ray-head", 8000),
    ("gateway", "ray-worker", 8000),
    ("gateway", "redis", 6379),
    ("ray-worker", "ray-head", 6379),
    ("ray-head", "ray-worker", 12345),
    ("operator", "ray-head", 8265),
]
REFUSED = [
    ("stranger", "ray-head", 8000),
    ("stranger", "ray-head", 8265),
    ("stranger", "ray-head", 10001),
    ("gateway", "ray-head", 8265),
    ("gateway", "ray-head", 10001),
    ("operator", "ray-head", 10001),
    ("stranger", "redis", 6379),
    ("ray-worker", "redis", 6379),
]


@pytest.mark.parametrize("overlay", overlay_names())
@pytest.mark.parametrize(("source", "target", "port"), ALLOWED)
def test_allowed(rendered: Rendered, overlay: str, source: str, target: str, port: int) -> None:
    found = pods(rendered[overlay])
    assert admits(rendered[overlay], found[source], found[target], port)


@pytest.mark.parametrize("overlay", overlay_names())
@pytest.mark.parametrize(("source", "target", "port"), REFUSED)
def test_refused(rendered: Rendered, overlay: str, source: str, target: str, port: int) -> None:
    found = pods(rendered[overlay])
    assert not admits(rendered[overlay], found[source], found[target], port)


def test_without_the_policies_everything_is_open(rendered: Rendered) -> None:
    docs = [d for d in rendered["eks-g6"] if d["kind"] != "NetworkPolicy"]
    found = pods(docs)
    assert all(admits(docs, found[s], found[t], p) for s, t, p in REFUSED)


def test_vpc_cni_enforces_network_policies() -> None:
    cluster = yaml.safe_load((K8S_DIR / "eksctl" / "cluster.yaml").read_text())
    (cni,) = [a for a in cluster["addons"] if a["name"] == "vpc-cni"]
    assert yaml.safe_load(cni["configurationValues"]) == {"enableNetworkPolicy": "true"}
