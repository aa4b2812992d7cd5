"""GPU placement of the engines: whole GPUs on nodes of their own, fractions on one machine.

Spread over nodes (EKS), each engine replica takes one GPU, Ray Serve LLM's default. On one
machine with fewer GPUs than engine replicas (the local GPU profile), replicas share GPUs: a
deployment's ``gpu_fraction`` f becomes a Ray placement bundle ``{GPU: f, CPU: 1}`` and vLLM's
``VLLM_RAY_PER_WORKER_GPUS=f`` (its worker actor must ask for what the bundle holds), and its
``gpu_memory_utilization`` must stay within f, or the engines sharing the GPU run out of memory
(vLLM sizes its KV cache from the fraction of the *whole* GPU it is given)::

    cfg = place_on_one_machine(cfg, gpus=1)  # serve_app/placement.py: 0.33 GPU per engine
    cfg.pd.prefill.gpu_fraction                  # 0.33
    effective_memory_utilization(cfg, cfg.pd.prefill)   # 0.29

Nothing here imports Ray, vLLM or torch: rendering and checking work on any machine.
"""

from __future__ import annotations

import math
import os
import shutil
import subprocess
from collections.abc import Iterator, Mapping
from typing import Any

from serve_app.config import Deployment, ServingConfig, deployments

# Of a replica's GPU fraction, the share vLLM may budget: the CUDA context, NCCL and the
# activations of the other engines on the GPU live outside vLLM's own accounting.
MEMORY_HEADROOM = 0.9
# Ray's resource accounting is fixed point (1e-4); fractions are kept to two decimals so that a
# sum of shares that fits on paper fits in Ray too.
_STEP = 100

PER_WORKER_GPUS_ENV = "VLLM_RAY_PER_WORKER_GPUS"


class NoGPUError(Exception):
    """The machine shows no GPU (no ``nvidia-smi``, or it lists none)."""


def share_per_replica(replicas: int, gpus: int) -> float:
    """The GPU fraction each of ``replicas`` gets on ``gpus`` GPUs: a whole GPU when there are
    enough, else an equal share small enough that every GPU holds the same number of them."""
    if replicas <= gpus:
        return 1.0
    per_gpu = math.ceil(replicas / gpus)
    return math.floor(_STEP / per_gpu) / _STEP


def memory_utilization_for(fraction: float) -> float:
    """vLLM's ``gpu_memory_utilization`` for a replica holding ``fraction`` of a GPU."""
    return math.floor(fraction * MEMORY_HEADROOM * _STEP) / _STEP


def effective_memory_utilization(cfg: ServingConfig, deployment: Deployment) -> float | None:
    """The deployment's own ``gpu_memory_utilization``, else the model's (None: vLLM's 0.9)."""
    if deployment.gpu_memory_utilization is not None:
        return deployment.gpu_memory_utilization
    return cfg.model.gpu_memory_utilization


def replica_count(deployment: Deployment) -> int:
    """Replicas that may run at once: the fixed count, or autoscaling's upper bound."""
    if deployment.autoscaling is not None:
        return deployment.autoscaling.max_replicas
    return deployment.replicas or 1


def gpu_demands(cfg: ServingConfig) -> Iterator[tuple[str, float]]:
    """One ``(key path, GPU fraction)`` per engine replica that may run at once."""
    for path, deployment in deployments(cfg):
        fraction = 1.0 if deployment.gpu_fraction is None else deployment.gpu_fraction
        for _ in range(replica_count(deployment)):
            yield path, fraction


def pack(demands: list[tuple[str, float]], gpus: int) -> list[list[tuple[str, float]]] | None:
    """First-fit decreasing onto ``gpus`` GPUs of capacity 1, the way Ray fills fractional GPUs;
    None if they do not fit. Exact in hundredths, so 3 x 0.33 fits and 3 x 0.34 does not."""
    bins: list[list[tuple[str, float]]] = [[] for _ in range(gpus)]
    free = [_STEP] * gpus
    for path, fraction in sorted(demands, key=lambda d: -d[1]):
        need = round(fraction * _STEP)
        slot = next((i for i, room in enumerate(free) if room >= need), None)
        if slot is None:
            return None
        free[slot] -= need
        bins[slot].append((path, fraction))
    return bins


def placement_group_config(deployment: Deployment) -> dict[str, Any] | None:
    """Ray Serve LLM's ``placement_group_config`` for a deployment with a GPU fraction."""
    if deployment.gpu_fraction is None:
        return None
    # STRICT_PACK: the engine's one worker and its bundle stay together on one node.
    return {"bundles": [{"GPU": deployment.gpu_fraction, "CPU": 1}], "strategy": "STRICT_PACK"}


def gpu_env(deployment: Deployment) -> dict[str, str]:
    """The environment vLLM's Ray executor needs for a fractional GPU: its worker actor asks Ray
    for ``VLLM_RAY_PER_WORKER_GPUS`` GPUs (1 by default), more than a fractional bundle holds."""
    if deployment.gpu_fraction is None:
        return {}
    return {PER_WORKER_GPUS_ENV: str(deployment.gpu_fraction)}


def detect_gpus(env: Mapping[str, str] | None = None) -> int:
    """GPUs this machine offers: ``CUDA_VISIBLE_DEVICES`` when set, else ``nvidia-smi -L``."""
    env = os.environ if env is None else env
    visible = env.get("CUDA_VISIBLE_DEVICES")
    if visible is not None:
        count = len([d for d in visible.split(",") if d.strip() and d.strip() != "-1"])
        if count == 0:
            raise NoGPUError("CUDA_VISIBLE_DEVICES hides every GPU")
        return count
    smi = shutil.which("nvidia-smi")
    if smi is None:
        raise NoGPUError("no nvidia-smi on PATH: is this a GPU machine with NVIDIA's driver?")
    listing = subprocess.run(  # noqa: S603 - a fixed command found on PATH
        [smi, "-L"], capture_output=True, text=True, timeout=30, check=False
    )
    count = sum(1 for line in listing.stdout.splitlines() if line.startswith("GPU "))
    if listing.returncode != 0 or count == 0:
        raise NoGPUError(f"nvidia-smi -L lists no GPU: {listing.stderr.strip() or listing.stdout}")
    return count
