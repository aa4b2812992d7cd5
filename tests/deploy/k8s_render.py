"""Render the kustomize overlays with the real ``kubectl kustomize`` (offline: no cluster)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Any

import yaml

REPO_ROOT = Path(__file__).resolve().parents[2]
K8S_DIR = REPO_ROOT / "k8s"
OVERLAYS_DIR = K8S_DIR / "overlays"


def overlay_names() -> list[str]:
    """Every folder under k8s/overlays with a kustomization: each must build and pass the checks."""
    return sorted(p.parent.name for p in OVERLAYS_DIR.glob("*/kustomization.yaml"))


def find_kubectl() -> str | None:
    return shutil.which("kubectl")


def kustomize_build(kubectl: str, folder: Path) -> list[dict[str, Any]]:
    """The manifests ``kubectl kustomize folder`` renders, as parsed YAML documents."""
    done = subprocess.run(
        [kubectl, "kustomize", str(folder)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    if done.returncode != 0:
        raise AssertionError(f"kubectl kustomize {folder} failed:\n{done.stderr}")
    return [doc for doc in yaml.safe_load_all(done.stdout) if doc is not None]


def by_kind(docs: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [d for d in docs if d.get("kind") == kind]


def one(docs: list[dict[str, Any]], kind: str, name: str) -> dict[str, Any]:
    found = [d for d in by_kind(docs, kind) if d["metadata"]["name"] == name]
    assert len(found) == 1, f"expected one {kind}/{name}, found {len(found)}"
    return found[0]


def describe(doc: dict[str, Any]) -> str:
    meta = doc.get("metadata", {})
    return f"{doc.get('kind')}/{meta.get('namespace', '-')}/{meta.get('name')}"
