"""The policies that matter for this system, on every rendered overlay; each also shown to fail."""

from __future__ import annotations

import copy
import re
from typing import Any

import pytest
import yaml

from tests.deploy.k8s_policy import (
    efa_nodegroups_not_in_one_zone,
    gpu_capacity_shortfalls,
    gpu_pods_beyond_node_groups,
    gpu_workers_off_efa_nodes,
    gpu_workers_without_efa,
    heads_that_schedule_work,
    missing_requests_or_limits,
    not_locked_down,
    pod_specs,
    ray_version_mismatches,
    unpinned_images,
)
from tests.deploy.k8s_render import K8S_DIR, REPO_ROOT, by_kind, one, overlay_names

Rendered = dict[str, list[dict[str, Any]]]
Doc = dict[str, Any]


def eksctl_cluster() -> Doc:
    cluster: Doc = yaml.safe_load((K8S_DIR / "eksctl" / "cluster.yaml").read_text())
    return cluster


def dockerfile_ray_version() -> str:
    text = (REPO_ROOT / "Dockerfile.ray").read_text()
    found = re.search(r"^ARG RAY_VERSION=(\S+)$", text, re.MULTILINE)
    assert found, "Dockerfile.ray declares no default RAY_VERSION"
    return found.group(1)


def violations(docs: list[Doc], check: Any, *args: Any) -> list[str]:
    return [v for d in docs for v in check(d, *args)]


@pytest.mark.parametrize("overlay", overlay_names())
def test_every_container_has_requests_and_limits(rendered: Rendered, overlay: str) -> None:
    assert violations(rendered[overlay], missing_requests_or_limits) == []


@pytest.mark.parametrize("overlay", overlay_names())
def test_every_container_runs_non_root_and_locked_down(rendered: Rendered, overlay: str) -> None:
    assert violations(rendered[overlay], not_locked_down) == []


@pytest.mark.parametrize("overlay", overlay_names())
def test_every_image_has_a_fixed_tag(rendered: Rendered, overlay: str) -> None:
    assert violations(rendered[overlay], unpinned_images) == []


@pytest.mark.parametrize("overlay", overlay_names())
def test_gpu_workers_bring_efa(rendered: Rendered, overlay: str) -> None:
    assert violations(rendered[overlay], gpu_workers_without_efa) == []


@pytest.mark.parametrize("overlay", overlay_names())
def test_ray_heads_schedule_no_work(rendered: Rendered, overlay: str) -> None:
    assert violations(rendered[overlay], heads_that_schedule_work) == []


@pytest.mark.parametrize("overlay", overlay_names())
def test_ray_version_matches_the_images(rendered: Rendered, overlay: str) -> None:
    found = violations(rendered[overlay], ray_version_mismatches, dockerfile_ray_version())
    assert found == []


def test_eks_overlay_has_gpu_workers_on_the_efa_node_group(rendered: Rendered) -> None:
    docs = rendered["eks-g6"]
    gpu_groups = [
        g
        for rs in by_kind(docs, "RayService")
        for g in rs["spec"]["rayClusterConfig"]["workerGroupSpecs"]
        if "nvidia.com/gpu" in g["template"]["spec"]["containers"][0]["resources"]["limits"]
    ]
    assert len(gpu_groups) == 2, "the PD and colocated RayServices each have a GPU group"
    assert violations(docs, gpu_workers_off_efa_nodes, eksctl_cluster()) == []


def test_the_efa_node_group_is_in_one_zone() -> None:
    cluster = eksctl_cluster()
    assert [g["name"] for g in cluster["managedNodeGroups"] if g.get("efaEnabled")] == ["gpu-efa"]
    assert efa_nodegroups_not_in_one_zone(cluster) == []


def test_gpu_node_group_is_tainted(rendered: Rendered) -> None:
    (gpu,) = [g for g in eksctl_cluster()["managedNodeGroups"] if g.get("efaEnabled")]
    assert {"key": "nvidia.com/gpu", "value": "true", "effect": "NoSchedule"} in gpu["taints"]
    assert gpu["instanceType"] == "g6.8xlarge"


@pytest.mark.parametrize("overlay", overlay_names())
def test_serve_never_wants_more_gpus_than_the_workers_hold(
    rendered: Rendered, overlay: str
) -> None:
    assert violations(rendered[overlay], gpu_capacity_shortfalls) == []


def test_the_gpu_node_group_fits_every_gpu_worker(rendered: Rendered) -> None:
    assert gpu_pods_beyond_node_groups(rendered["eks-g6"], eksctl_cluster()) == []


def test_gateway_is_highly_available_and_probed(rendered: Rendered) -> None:
    for overlay in overlay_names():
        docs = rendered[overlay]
        deployment = one(docs, "Deployment", "pd-gateway")
        assert deployment["spec"]["replicas"] >= 2
        (container,) = deployment["spec"]["template"]["spec"]["containers"]
        assert container["readinessProbe"]["httpGet"]["path"] == "/readyz"
        assert container["livenessProbe"]["httpGet"]["path"] == "/healthz"
        hpa = one(docs, "HorizontalPodAutoscaler", "pd-gateway")
        assert hpa["spec"]["scaleTargetRef"]["name"] == "pd-gateway"
        assert hpa["spec"]["minReplicas"] >= 2
        pdb = one(docs, "PodDisruptionBudget", "pd-gateway")
        pod_labels = deployment["spec"]["template"]["metadata"]["labels"]
        assert pdb["spec"]["selector"]["matchLabels"].items() <= pod_labels.items()


def test_gateway_secrets_come_only_from_secret_refs(rendered: Rendered) -> None:
    deployment = one(rendered["eks-g6"], "Deployment", "pd-gateway")
    env = {e["name"]: e for e in deployment["spec"]["template"]["spec"]["containers"][0]["env"]}
    for name in (
        "DATABASE_URL",
        "PD_GATEWAY_KEY_HASH_SECRET",
        "REDIS_URL",
        "PD_GATEWAY_METRICS_TOKEN",
    ):
        assert "value" not in env[name]
        assert env[name]["valueFrom"]["secretKeyRef"]["name"] == "pd-gateway-secrets"
    # The config file the admin commands (kubectl exec ... pd-gateway keys) read is the mounted one.
    (mount,) = [
        m
        for m in deployment["spec"]["template"]["spec"]["containers"][0]["volumeMounts"]
        if m["name"] == "config"
    ]
    assert env["PD_GATEWAY_CONFIG"]["value"] == mount["mountPath"] + "/gateway.yaml"


# The checks themselves must be able to fail: each broken copy below is caught.


def pd_rayservice(rendered: Rendered) -> Doc:
    return copy.deepcopy(one(rendered["eks-g6"], "RayService", "pd"))


def gpu_container(rayservice: Doc) -> Doc:
    container: Doc = rayservice["spec"]["rayClusterConfig"]["workerGroupSpecs"][0]["template"][
        "spec"
    ]["containers"][0]
    return container


def test_policy_catches_missing_limits_and_root(rendered: Rendered) -> None:
    gateway = copy.deepcopy(one(rendered["eks-g6"], "Deployment", "pd-gateway"))
    container = gateway["spec"]["template"]["spec"]["containers"][0]
    del container["resources"]["limits"]["memory"]
    container["securityContext"]["runAsUser"] = 0
    container["securityContext"]["readOnlyRootFilesystem"] = False
    assert missing_requests_or_limits(gateway) != []
    container["image"] = "pd-gateway"
    assert unpinned_images(gateway) != []
    container["image"] = "registry.example:5000/pd-gateway:latest"
    assert unpinned_images(gateway) != []
    assert len(not_locked_down(gateway)) == 2

    pd = pd_rayservice(rendered)
    del pd["spec"]["rayClusterConfig"]["headGroupSpec"]["template"]["spec"]["securityContext"]
    assert any("runAsNonRoot" in v for v in not_locked_down(pd))


def test_policy_catches_a_gpu_worker_without_efa(rendered: Rendered) -> None:
    pd = pd_rayservice(rendered)
    container = gpu_container(pd)
    for section in ("requests", "limits"):
        del container["resources"][section]["vpc.amazonaws.com/efa"]
    container["env"] = []
    container["securityContext"]["capabilities"]["add"] = []
    container["volumeMounts"] = []
    found = gpu_workers_without_efa(pd)
    assert len(found) == 5, found


def test_policy_catches_a_working_head_and_a_version_mismatch(rendered: Rendered) -> None:
    pd = pd_rayservice(rendered)
    pd["spec"]["rayClusterConfig"]["headGroupSpec"]["rayStartParams"]["num-cpus"] = "4"
    assert heads_that_schedule_work(pd) != []
    assert ray_version_mismatches(pd, dockerfile_ray_version()) == []
    pd["spec"]["rayClusterConfig"]["rayVersion"] = "2.59.0"
    assert ray_version_mismatches(pd, dockerfile_ray_version()) != []
    # The custom image instead of the DLC: its tag must be Dockerfile.ray's Ray and rayVersion's.
    pd["spec"]["rayClusterConfig"]["rayVersion"] = dockerfile_ray_version()
    gpu_container(pd)["image"] = "pd-serve:ray2.59.0-gpu"
    assert ray_version_mismatches(pd, dockerfile_ray_version()) != []


def test_the_walkthrough_runs_the_aws_ray_llm_dlc_and_cpu_the_custom_image(
    rendered: Rendered,
) -> None:
    for overlay, image_prefix in [
        ("eks-g6", "public.ecr.aws/deep-learning-containers/ray:serve-llm-cuda-v"),
        ("cpu", "pd-serve:ray"),
    ]:
        for rayservice in by_kind(rendered[overlay], "RayService"):
            images = {c["image"] for _, spec in pod_specs(rayservice) for c in spec["containers"]}
            assert len(images) == 1 and images.pop().startswith(image_prefix), overlay


def test_policy_catches_efa_across_zones_and_workers_off_it(rendered: Rendered) -> None:
    cluster = eksctl_cluster()
    spread = copy.deepcopy(cluster)
    for group in spread["managedNodeGroups"]:
        if group.get("efaEnabled"):
            group["availabilityZones"] = spread["availabilityZones"]
    assert efa_nodegroups_not_in_one_zone(spread) != []

    pd = pd_rayservice(rendered)
    worker = pd["spec"]["rayClusterConfig"]["workerGroupSpecs"][0]["template"]["spec"]
    worker["nodeSelector"] = {"pd-gateway.io/node-role": "system"}
    assert gpu_workers_off_efa_nodes(pd, cluster) != []


def test_policy_catches_gpu_shortfalls(rendered: Rendered) -> None:
    pd = pd_rayservice(rendered)
    pd["spec"]["rayClusterConfig"]["workerGroupSpecs"][0]["maxReplicas"] = 1
    assert gpu_capacity_shortfalls(pd) != []  # prefill and decode need one GPU each

    small = eksctl_cluster()
    for group in small["managedNodeGroups"]:
        if group.get("efaEnabled"):
            group["minSize"], group["maxSize"] = 2, 3
    assert len(gpu_pods_beyond_node_groups(rendered["eks-g6"], small)) == 2
