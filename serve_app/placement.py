"""Placing every engine of a serving config on one machine's GPUs (the local GPU profile)::

    cfg = place_on_one_machine(cfg, gpus=1)      # prefill, decode, colocated: 0.33 GPU each

Above the loader: the placed document is validated again, cross-key checks included.
"""

from __future__ import annotations

import math

from serve_app.config import ServingConfig, deployments
from serve_app.gpu import (
    effective_memory_utilization,
    gpu_demands,
    memory_utilization_for,
    replica_count,
    share_per_replica,
)
from serve_app.loader import validate_document


def place_on_one_machine(cfg: ServingConfig, gpus: int) -> ServingConfig:
    """``cfg`` with ``accelerator.gpus`` set and every engine deployment given a GPU fraction
    and a memory share where it has none; validated again (the fit included)."""
    engines = sum(replica_count(d) for _, d in deployments(cfg) if d.gpu_fraction is None)
    taken = sum(f for _, f in gpu_demands(cfg)) - engines
    share = share_per_replica(engines, max(1, math.floor(gpus - taken))) if engines else 1.0
    document = cfg.model_dump(mode="json", exclude_none=True)
    document["accelerator"]["gpus"] = gpus
    for path, deployment in deployments(cfg):
        node = document
        for key in path.split("."):
            node = node[key]
        fraction = deployment.gpu_fraction or share
        node["gpu_fraction"] = fraction
        if effective_memory_utilization(cfg, deployment) is None and fraction < 1:
            node["gpu_memory_utilization"] = memory_utilization_for(fraction)
    return validate_document(document)
