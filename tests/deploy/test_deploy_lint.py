"""hadolint on every Dockerfile, yamllint on every YAML file under k8s/."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.deploy.k8s_render import K8S_DIR, REPO_ROOT

DOCKERFILES = sorted(
    [*REPO_ROOT.glob("Dockerfile*"), *REPO_ROOT.glob("docker/**/*Dockerfile*")],
    key=lambda p: p.name,
)


def tool(name: str) -> str:
    """A console script from the dev extra: beside this interpreter first, then on PATH."""
    beside = Path(sys.executable).parent / name
    found = str(beside) if beside.exists() else shutil.which(name)
    if found is None:
        pytest.fail(f"{name} not found: install the dev extra (pip install -e '.[dev]')")
    return found


def test_both_images_have_a_dockerfile() -> None:
    assert {p.name for p in DOCKERFILES} >= {"Dockerfile", "Dockerfile.ray"}


@pytest.mark.parametrize("dockerfile", DOCKERFILES, ids=lambda p: p.name)
def test_hadolint_passes(dockerfile: Path) -> None:
    done = subprocess.run(
        [tool("hadolint"), "--no-color", str(dockerfile)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr


def test_hadolint_can_fail(tmp_path: Path) -> None:
    bad = tmp_path / "Dockerfile"
    bad.write_text("FROM python:latest\nRUN apt-get install -y curl\n")
    done = subprocess.run(
        [tool("hadolint"), "--no-color", str(bad)], capture_output=True, check=False
    )
    assert done.returncode != 0


def test_yamllint_passes_on_k8s() -> None:
    done = subprocess.run(
        [tool("yamllint"), "--strict", "-c", str(K8S_DIR / ".yamllint.yaml"), str(K8S_DIR)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
