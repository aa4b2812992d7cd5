"""Strict schema validation of every rendered manifest, offline."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from tests.deploy.k8s_render import describe, one, overlay_names
from tests.deploy.k8s_schemas import (
    CUSTOM_KINDS,
    kubernetes_version,
    validate_core,
    validate_custom,
)

Rendered = dict[str, list[dict[str, Any]]]


def is_custom(doc: dict[str, Any]) -> bool:
    return (doc.get("apiVersion"), doc.get("kind")) in CUSTOM_KINDS


@pytest.mark.parametrize("overlay", overlay_names())
def test_core_manifests_validate_strictly(rendered: Rendered, overlay: str) -> None:
    version = kubernetes_version()
    errors = {describe(d): validate_core(d, version) for d in rendered[overlay] if not is_custom(d)}
    assert {k: v for k, v in errors.items() if v} == {}


@pytest.mark.parametrize("overlay", overlay_names())
def test_rayservices_validate_strictly_against_the_kuberay_crd(
    rendered: Rendered, overlay: str
) -> None:
    version = kubernetes_version()
    custom = [d for d in rendered[overlay] if is_custom(d)]
    assert custom, "expected RayServices"
    errors = {describe(d): validate_custom(d, version) for d in custom}
    assert {k: v for k, v in errors.items() if v} == {}


def test_unknown_custom_kinds_are_not_waved_through() -> None:
    doc = {"apiVersion": "ray.io/v1", "kind": "RayJob", "metadata": {"name": "x"}}
    assert validate_custom(doc, kubernetes_version()) != []


def test_a_typo_in_a_rayservice_fails(rendered: Rendered) -> None:
    pd = one(rendered["eks-g6"], "RayService", "pd")
    version = kubernetes_version()
    typo_in_spec = copy.deepcopy(pd)
    typo_in_spec["spec"]["serveConfigv2"] = typo_in_spec["spec"].pop("serveConfigV2")
    assert any("serveConfigv2" in e for e in validate_custom(typo_in_spec, version))

    typo_in_pod = copy.deepcopy(pd)
    worker = typo_in_pod["spec"]["rayClusterConfig"]["workerGroupSpecs"][0]
    worker["template"]["spec"]["containers"][0]["resourcez"] = {}
    assert any("resourcez" in e for e in validate_custom(typo_in_pod, version))

    wrong_type = copy.deepcopy(pd)
    wrong_type["spec"]["rayClusterConfig"]["workerGroupSpecs"][0]["maxReplicas"] = "4"
    assert any("maxReplicas" in e for e in validate_custom(wrong_type, version))

    typo_in_metadata = copy.deepcopy(pd)
    typo_in_metadata["metadata"]["label"] = {"a": "b"}
    assert any("label" in e for e in validate_custom(typo_in_metadata, version))


def test_a_typo_in_a_core_manifest_fails(rendered: Rendered) -> None:
    gateway = copy.deepcopy(one(rendered["eks-g6"], "Deployment", "pd-gateway"))
    gateway["spec"]["template"]["spec"]["containers"][0]["readinesProbe"] = {}
    assert validate_core(gateway, kubernetes_version()) != []
