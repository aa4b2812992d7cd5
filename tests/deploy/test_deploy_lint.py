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


def copy_sources(dockerfile: Path) -> list[str]:
    """Sources of the build-context COPY instructions (not COPY --from=stage)."""
    sources = []
    for line in dockerfile.read_text().splitlines():
        words = line.split()
        if not words or words[0] != "COPY" or any(w.startswith("--from") for w in words):
            continue
        sources += [w for w in words[1:-1] if not w.startswith("--")]
    return sources


@pytest.mark.parametrize("dockerfile", DOCKERFILES, ids=lambda p: p.name)
def test_copied_files_exist_and_pass_dockerignore(dockerfile: Path) -> None:
    # .dockerignore here excludes everything, then re-includes what the images copy ("!path").
    ignore = (REPO_ROOT / ".dockerignore").read_text().splitlines()
    included = {line[1:].rstrip("/") for line in ignore if line.startswith("!")}
    sources = copy_sources(dockerfile)
    assert sources, f"{dockerfile.name} copies nothing from the build context"
    for source in sources:
        assert (REPO_ROOT / source).exists(), f"{dockerfile.name}: COPY {source}: no such file"
        assert source.rstrip("/").removeprefix("./") in included, f".dockerignore drops {source}"


def test_the_gateway_image_leaves_serve_app_out() -> None:
    # The gateway never imports Ray, vLLM or serve_app: its image must not carry them.
    assert "serve_app" not in copy_sources(REPO_ROOT / "Dockerfile")
