"""Fixtures for the offline deployment checks: kubectl and the rendered overlays."""

from __future__ import annotations

from typing import Any

import pytest

from tests.deploy.k8s_render import OVERLAYS_DIR, find_kubectl, kustomize_build, overlay_names


@pytest.fixture(scope="session")
def kubectl() -> str:
    found = find_kubectl()
    if found is None:
        # Loud on purpose: these checks are the only proof that k8s/ renders and validates.
        pytest.skip(
            "SKIPPED LOUDLY: kubectl is not on PATH, so k8s/ overlays cannot be rendered. Install "
            "kubectl 1.32+ (kustomize v5 built in; no cluster needed) to run tests/deploy fully."
        )
    return found


@pytest.fixture(scope="session")
def rendered(kubectl: str) -> dict[str, list[dict[str, Any]]]:
    """Every overlay rendered once per test run: overlay name -> its manifests."""
    return {name: kustomize_build(kubectl, OVERLAYS_DIR / name) for name in overlay_names()}
