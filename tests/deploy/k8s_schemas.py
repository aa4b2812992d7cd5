"""Schema checks: core kinds with kubernetes-validate (strict), RayService with the KubeRay CRD.

The CRD's OpenAPI schema leaves its objects open to unknown keys, so a misspelt field
(``resourcez``) would pass it. :func:`strict_schema` closes every object that lists its
``properties``, which is what the API server's structural pruning would do silently (drop the
field); here it fails instead.
"""

from __future__ import annotations

import copy
from functools import cache
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import yaml

from tests.deploy.k8s_render import K8S_DIR

CRD_DIR = Path(__file__).resolve().parent / "schemas" / "kuberay"
CUSTOM_KINDS = {("ray.io/v1", "RayService"): CRD_DIR / "ray.io_rayservices.yaml"}


def kubernetes_version() -> str:
    """The cluster's Kubernetes version, as the eksctl ClusterConfig creates it."""
    cluster = yaml.safe_load((K8S_DIR / "eksctl" / "cluster.yaml").read_text())
    return str(cluster["metadata"]["version"])


def validate_core(doc: dict[str, Any], version: str) -> list[str]:
    """Errors of one core manifest against Kubernetes' own schemas, unknown fields included."""
    try:
        kubernetes_validate.validate(doc, version, strict=True)
    except kubernetes_validate.ValidationError as err:
        where = ".".join(str(p) for p in err.path)
        return [f"{where}: {err.message}"]
    except kubernetes_validate.SchemaNotFoundError as err:
        return [f"no Kubernetes {version} schema for this kind: {err.message}"]
    return []


def strict_schema(schema: Any) -> Any:
    """A copy of an OpenAPI schema in which objects that list properties allow no others."""
    out = copy.deepcopy(schema)

    def close(node: Any) -> None:
        if isinstance(node, dict):
            if (
                "properties" in node
                and "additionalProperties" not in node
                and not node.get("x-kubernetes-preserve-unknown-fields")
            ):
                node["additionalProperties"] = False
            for value in node.values():
                close(value)
        elif isinstance(node, list):
            for item in node:
                close(item)

    close(out)
    return out


@cache
def crd_validator(api_version: str, kind: str) -> jsonschema.protocols.Validator:
    crd = yaml.safe_load(CUSTOM_KINDS[(api_version, kind)].read_text())
    version = api_version.split("/")[1]
    (served,) = [v for v in crd["spec"]["versions"] if v["name"] == version]
    schema = strict_schema(served["schema"]["openAPIV3Schema"])
    # The CRD's top level lists no apiVersion/kind values; pin them so a wrong one fails too.
    schema["properties"]["apiVersion"] = {"const": api_version}
    schema["properties"]["kind"] = {"const": kind}
    validator_cls = jsonschema.validators.validator_for(schema, default=jsonschema.Draft7Validator)
    return validator_cls(schema)


def validate_custom(doc: dict[str, Any], version: str) -> list[str]:
    """Errors of one custom resource: the strict CRD schema, plus Kubernetes' own schema for the
    parts that are core types (object metadata and every embedded pod template)."""
    key = (doc.get("apiVersion", ""), doc.get("kind", ""))
    if key not in CUSTOM_KINDS:
        return [f"no CRD schema for {key[0]} {key[1]}"]
    errors = [
        f"{'.'.join(str(p) for p in e.absolute_path)}: {e.message}"
        for e in crd_validator(*key).iter_errors(doc)
    ]
    # The CRD types metadata as a bare object: check it as the ObjectMeta it is.
    errors += validate_core(
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": doc["metadata"]}, version
    )
    for where, template in embedded_pod_templates(doc):
        wrapped = {
            "apiVersion": "v1",
            "kind": "PodTemplate",
            "metadata": {"name": "t"},
            "template": template,
        }
        errors += [f"{where}: {e}" for e in validate_core(wrapped, version)]
    return errors


def embedded_pod_templates(doc: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    if doc.get("kind") != "RayService":
        return []
    cluster = doc["spec"]["rayClusterConfig"]
    found = [("headGroupSpec.template", cluster["headGroupSpec"]["template"])]
    for group in cluster.get("workerGroupSpecs", []):
        found.append((f"workerGroupSpecs[{group['groupName']}].template", group["template"]))
    return found
