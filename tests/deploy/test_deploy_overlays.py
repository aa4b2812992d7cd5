"""Every overlay builds with the real ``kubectl kustomize`` and holds the pieces of the system."""

from __future__ import annotations

from typing import Any

import pytest

from tests.deploy.k8s_render import K8S_DIR, by_kind, kustomize_build, one, overlay_names


def test_the_walkthrough_and_cpu_overlays_exist() -> None:
    assert {"eks-g6", "cpu"} <= set(overlay_names())


def test_base_builds(kubectl: str) -> None:
    assert kustomize_build(kubectl, K8S_DIR / "base")


@pytest.mark.parametrize("overlay", overlay_names())
def test_overlay_holds_the_system(rendered: dict[str, list[dict[str, Any]]], overlay: str) -> None:
    docs = rendered[overlay]
    for kind, name in [
        ("Deployment", "pd-gateway"),
        ("Service", "pd-gateway"),
        ("HorizontalPodAutoscaler", "pd-gateway"),
        ("PodDisruptionBudget", "pd-gateway"),
        ("Deployment", "redis"),
        ("Service", "redis"),
        ("RayService", "pd"),
        ("RayService", "colocated"),
    ]:
        one(docs, kind, name)
    (config_map,) = [
        c for c in by_kind(docs, "ConfigMap") if c["metadata"]["namespace"] == "pd-gateway"
    ]
    assert "gateway.yaml" in config_map["data"]


@pytest.mark.parametrize("overlay", overlay_names())
def test_no_secret_is_committed(rendered: dict[str, list[dict[str, Any]]], overlay: str) -> None:
    # Secrets are created in the cluster (docs/deploy-eks.md); the manifests only reference them.
    assert by_kind(rendered[overlay], "Secret") == []
