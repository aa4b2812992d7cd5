"""Policy checks over rendered manifests. Each check returns the violations it found (empty when
the manifests comply), so a test can show both that the real manifests pass and that a broken
copy fails.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import yaml

from tests.deploy.k8s_render import describe

Doc = dict[str, Any]

WORKLOAD_KINDS = {"Deployment", "StatefulSet", "DaemonSet", "Job"}
GPU = "nvidia.com/gpu"
EFA = "vpc.amazonaws.com/efa"
# Containers allowed a writable root filesystem, and why: Ray writes its session folder
# (/tmp/ray), logs and runtime_env downloads (working_dir, pip) under its home at run time, and
# the Ray images expect both to be writable. They still run as non-root (uid 1000).
WRITABLE_ROOT_CONTAINERS = {"ray-head": "Ray session files", "ray-worker": "Ray session files"}


def pod_specs(doc: Doc) -> Iterator[tuple[str, Doc]]:
    """(where, pod spec) for every pod a manifest creates, RayService head and workers included."""
    if doc.get("kind") in WORKLOAD_KINDS:
        yield describe(doc), doc["spec"]["template"]["spec"]
    elif doc.get("kind") == "RayService":
        cluster = doc["spec"]["rayClusterConfig"]
        yield f"{describe(doc)} head", cluster["headGroupSpec"]["template"]["spec"]
        for group in cluster.get("workerGroupSpecs", []):
            yield f"{describe(doc)} workers {group['groupName']}", group["template"]["spec"]


def containers(spec: Doc) -> list[Doc]:
    return [*spec.get("initContainers", []), *spec.get("containers", [])]


def missing_requests_or_limits(doc: Doc) -> list[str]:
    problems = []
    for where, spec in pod_specs(doc):
        for c in containers(spec):
            resources = c.get("resources", {})
            for section in ("requests", "limits"):
                for resource in ("cpu", "memory"):
                    if resource not in resources.get(section, {}):
                        problems.append(f"{where} {c['name']}: no {section}.{resource}")
    return problems


def not_locked_down(doc: Doc) -> list[str]:
    """Non-root, no privilege escalation, capabilities dropped, read-only root filesystem (bar the
    named exceptions)."""
    problems = []
    for where, spec in pod_specs(doc):
        pod = spec.get("securityContext", {})
        for c in containers(spec):
            own = c.get("securityContext", {})
            name = f"{where} {c['name']}"
            if not own.get("runAsNonRoot", pod.get("runAsNonRoot", False)):
                problems.append(f"{name}: runAsNonRoot is not true")
            if own.get("runAsUser", pod.get("runAsUser")) == 0:
                problems.append(f"{name}: runs as uid 0")
            if own.get("allowPrivilegeEscalation", True):
                problems.append(f"{name}: allowPrivilegeEscalation is not false")
            if own.get("privileged", False):
                problems.append(f"{name}: privileged")
            if "ALL" not in own.get("capabilities", {}).get("drop", []):
                problems.append(f"{name}: capabilities not dropped (drop: [ALL])")
            writable_ok = c["name"] in WRITABLE_ROOT_CONTAINERS
            if not writable_ok and not own.get("readOnlyRootFilesystem", False):
                problems.append(f"{name}: root filesystem is writable")
    return problems


def gpu_workers_without_efa(doc: Doc) -> list[str]:
    """A GPU worker must bring what NIXL's LIBFABRIC backend needs on EFA, in the pod itself."""
    problems = []
    for where, spec in pod_specs(doc):
        for c in spec.get("containers", []):
            resources = c.get("resources", {})
            if GPU not in resources.get("limits", {}):
                continue
            name = f"{where} {c['name']}"
            for section in ("requests", "limits"):
                if int(resources.get(section, {}).get(EFA, 0)) < 1:
                    problems.append(f"{name}: {section} has no {EFA}")
                if not any(k.startswith("hugepages-") for k in resources.get(section, {})):
                    problems.append(
                        f"{name}: {section} has no hugepages (EFA's libfabric uses them)"
                    )
            if "IPC_LOCK" not in c.get("securityContext", {}).get("capabilities", {}).get(
                "add", []
            ):
                problems.append(f"{name}: no IPC_LOCK capability (EFA pins memory)")
            env = {e["name"]: e.get("value") for e in c.get("env", [])}
            if env.get("FI_PROVIDER") != "efa":
                problems.append(f"{name}: FI_PROVIDER is not efa")
            problems += _shm_problems(name, spec, c)
            if not any(t.get("key") == GPU for t in spec.get("tolerations", [])):
                problems.append(f"{name}: does not tolerate the {GPU} taint of GPU nodes")
    return problems


def _shm_problems(name: str, spec: Doc, container: Doc) -> list[str]:
    memory_volumes = {
        v["name"]
        for v in spec.get("volumes", [])
        if v.get("emptyDir", {}).get("medium") == "Memory"
    }
    mounts = {m["mountPath"]: m["name"] for m in container.get("volumeMounts", [])}
    if mounts.get("/dev/shm") not in memory_volumes:
        return [f"{name}: /dev/shm is not a memory-backed emptyDir"]
    return []


def heads_that_schedule_work(doc: Doc) -> list[str]:
    if doc.get("kind") != "RayService":
        return []
    params = doc["spec"]["rayClusterConfig"]["headGroupSpec"].get("rayStartParams", {})
    if params.get("num-cpus") != "0":
        return [f'{describe(doc)}: head rayStartParams num-cpus is not "0"']
    return []


IMAGE_RAY_VERSION = re.compile(r":ray(\d+\.\d+\.\d+)-")
# The AWS Ray LLM DLC's tags carry no Ray version: AWS's changelog for serve-llm-cuda says which.
DLC_RAY_VERSIONS = {
    "public.ecr.aws/deep-learning-containers/ray:serve-llm-cuda-v1.0.0": "2.58.0",
}


def image_ray_version(image: str, dockerfile_ray_version: str) -> str | None:
    """The Ray inside an image: a known DLC tag's, or our own image's ``ray<version>-`` tag,
    which Dockerfile.ray builds only from its RAY_VERSION."""
    if image in DLC_RAY_VERSIONS:
        return DLC_RAY_VERSIONS[image]
    found = IMAGE_RAY_VERSION.search(image)
    if found is None or found.group(1) != dockerfile_ray_version:
        return None
    return found.group(1)


def ray_version_mismatches(doc: Doc, dockerfile_ray_version: str) -> list[str]:
    """rayVersion equals the Ray inside every image of the RayService."""
    if doc.get("kind") != "RayService":
        return []
    version = doc["spec"]["rayClusterConfig"].get("rayVersion")
    problems = []
    for where, spec in pod_specs(doc):
        for c in spec.get("containers", []):
            inside = image_ray_version(c["image"], dockerfile_ray_version)
            if inside != version:
                problems.append(
                    f"{where} {c['name']}: rayVersion {version}, but image {c['image']} has Ray "
                    f"{inside or 'unknown (not a known DLC tag, nor Dockerfile.ray RAY_VERSION)'}"
                )
    return problems


def efa_nodegroups_not_in_one_zone(cluster: Doc) -> list[str]:
    problems = []
    for group in cluster.get("managedNodeGroups", []) + cluster.get("nodeGroups", []):
        if not group.get("efaEnabled"):
            continue
        zones = group.get("availabilityZones", [])
        if len(zones) != 1:
            problems.append(f"node group {group['name']}: EFA needs exactly one zone, has {zones}")
        elif zones[0] not in cluster.get("availabilityZones", []):
            problems.append(f"node group {group['name']}: zone {zones[0]} is not the cluster's")
    return problems


def gpu_workers_off_efa_nodes(doc: Doc, cluster: Doc) -> list[str]:
    """Every GPU worker's nodeSelector must pick an EFA-enabled node group: its labels, and its
    instance type when the selector names one."""
    efa_groups = [g for g in cluster.get("managedNodeGroups", []) if g.get("efaEnabled")]
    problems = []
    for where, spec in pod_specs(doc):
        if not any(GPU in c.get("resources", {}).get("limits", {}) for c in spec["containers"]):
            continue
        selector = dict(spec.get("nodeSelector", {}))
        instance_type = selector.pop(INSTANCE_TYPE_LABEL, None)
        if not selector or not any(_selects(g, selector, instance_type) for g in efa_groups):
            problems.append(f"{where}: nodeSelector {spec.get('nodeSelector')} picks no EFA group")
    return problems


INSTANCE_TYPE_LABEL = "node.kubernetes.io/instance-type"


def _selects(group: Doc, labels: dict[str, str], instance_type: str | None) -> bool:
    if instance_type is not None and instance_type != group.get("instanceType"):
        return False
    return labels.items() <= group.get("labels", {}).items()


def engine_configs(app: Doc) -> list[Doc]:
    """The LLM configs of one rendered Serve application (PD: prefill and decode; else its list)."""
    args = app["args"]
    if "llm_configs" in args:
        return list(args["llm_configs"])
    return [args["prefill_config"], args["decode_config"]]


def most_gpus_wanted(app: Doc) -> int:
    """GPUs the app's engines can ask for at their most: replicas (or the autoscaling ceiling)
    times the GPUs of one engine (tensor x pipeline parallel)."""
    total = 0
    for cfg in engine_configs(app):
        if cfg.get("accelerator_config", {}).get("kind") == "cpu":
            continue
        deployment = cfg.get("deployment_config", {})
        replicas = deployment.get("autoscaling_config", {}).get("max_replicas")
        replicas = replicas or deployment.get("num_replicas", 1)
        kwargs = cfg.get("engine_kwargs", {})
        per_engine = kwargs.get("tensor_parallel_size", 1) * kwargs.get("pipeline_parallel_size", 1)
        total += replicas * per_engine
    return total


def gpu_capacity_shortfalls(doc: Doc) -> list[str]:
    """Serve must never want more GPUs than the worker groups may ever have: such a replica stays
    pending forever and the RayService never becomes ready."""
    if doc.get("kind") != "RayService":
        return []
    apps = yaml.safe_load(doc["spec"].get("serveConfigV2", "")) or {}
    wanted = sum(most_gpus_wanted(app) for app in apps.get("applications", []))
    available = 0
    for group in doc["spec"]["rayClusterConfig"].get("workerGroupSpecs", []):
        for c in group["template"]["spec"]["containers"]:
            available += group["maxReplicas"] * int(c["resources"].get("limits", {}).get(GPU, 0))
    if wanted > available:
        return [
            f"{describe(doc)}: Serve may want {wanted} GPUs, the worker groups hold {available}"
        ]
    return []


def gpu_pods_beyond_node_groups(docs: list[Doc], cluster: Doc) -> list[str]:
    """The GPU node group must fit every GPU worker pod (one per node) at the groups' minimum and
    maximum sizes, or pods stay Pending."""
    groups = [
        g
        for rs in docs
        if rs.get("kind") == "RayService"
        for g in rs["spec"]["rayClusterConfig"].get("workerGroupSpecs", [])
        if any(GPU in c["resources"].get("limits", {}) for c in g["template"]["spec"]["containers"])
    ]
    efa = [g for g in cluster.get("managedNodeGroups", []) if g.get("efaEnabled")]
    nodes_min = sum(g.get("minSize", 0) for g in efa)
    nodes_max = sum(g.get("maxSize", 0) for g in efa)
    pods_min = sum(g["minReplicas"] for g in groups)
    pods_max = sum(g["maxReplicas"] for g in groups)
    problems = []
    if pods_min > nodes_min:
        problems.append(f"{pods_min} GPU worker pods at minimum, {nodes_min} GPU nodes at minimum")
    if pods_max > nodes_max:
        problems.append(f"{pods_max} GPU worker pods at most, {nodes_max} GPU nodes at most")
    return problems


def unpinned_images(doc: Doc) -> list[str]:
    """Every image names a tag (or digest) other than latest, so a rollout is reproducible."""
    problems = []
    for where, spec in pod_specs(doc):
        for c in containers(spec):
            image = c["image"]
            name, _, tag = image.rpartition(":") if "@" not in image else (image, "", "digest")
            if not name or "/" in tag or tag in ("", "latest"):
                problems.append(f"{where} {c['name']}: image {image} has no fixed tag")
    return problems
