"""Each RayService's serveConfigV2 is exactly what serve_app renders for its overlay's serving
config, and Ray Serve's own schema accepts it."""

from __future__ import annotations

import importlib
import importlib.util
import subprocess
import sys
import warnings
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import yaml

from tests.deploy.k8s_render import K8S_DIR, by_kind, one, overlay_names

Rendered = dict[str, list[dict[str, Any]]]


def generator() -> ModuleType:
    """k8s/render_serve_configs.py, the script that writes the overlays' serveConfigV2 patches."""
    spec = importlib.util.spec_from_file_location(
        "render_serve_configs", K8S_DIR / "render_serve_configs.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_every_overlay_with_rayservices_has_a_serving_config(rendered: Rendered) -> None:
    with_rayservices = {o for o in overlay_names() if by_kind(rendered[o], "RayService")}
    assert with_rayservices == set(generator().SERVING_CONFIGS)


@pytest.mark.parametrize("overlay", overlay_names())
def test_serve_config_v2_is_the_renderers_output(rendered: Rendered, overlay: str) -> None:
    gen = generator()
    cfg = gen.load(overlay)
    for rayservice, pool in gen.RAYSERVICE_POOLS.items():
        deployed = one(rendered[overlay], "RayService", rayservice)["spec"]["serveConfigV2"]
        assert deployed == gen.serve_config_v2(cfg, pool), (
            f"{overlay}: RayService {rayservice} is stale; run python k8s/render_serve_configs.py"
        )


def test_each_rayservice_runs_only_its_own_pool(rendered: Rendered) -> None:
    for overlay in overlay_names():
        for name in ("pd", "colocated"):
            doc = one(rendered[overlay], "RayService", name)
            apps = yaml.safe_load(doc["spec"]["serveConfigV2"])["applications"]
            assert [app["name"] for app in apps] == [name]


def test_generated_patches_are_up_to_date() -> None:
    # As CI or a developer runs it: a separate process, from the repository root.
    script = K8S_DIR / "render_serve_configs.py"
    done = subprocess.run(
        [sys.executable, str(script), "--check"],
        cwd=K8S_DIR.parent,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr


def test_a_stale_patch_is_reported_then_rewritten(tmp_path: Path) -> None:
    gen = generator()
    for overlay in gen.SERVING_CONFIGS:
        (tmp_path / overlay).mkdir()
    missing = gen.sync_patches(tmp_path, write=False)
    assert len(missing) == 2 * len(gen.SERVING_CONFIGS)
    assert not any(tmp_path.rglob("*.yaml"))
    assert gen.sync_patches(tmp_path) == missing
    assert gen.sync_patches(tmp_path, write=False) == []
    edited = missing[0]
    edited.write_text(edited.read_text().replace("num_replicas: 1", "num_replicas: 3", 1))
    assert gen.sync_patches(tmp_path, write=False) == [edited]


def ray_attr(module: str, name: str) -> Any:
    """Import from Ray, or skip loudly when Ray is not installed. Ray's own pydantic deprecation
    warnings at import are silenced: they are Ray's, and pytest turns warnings into errors."""
    if importlib.util.find_spec("ray") is None:
        pytest.skip(
            "ray is not installed (scripts/install-serve-cpu.sh installs it): serveConfigV2 was "
            "NOT checked against Ray Serve's own schemas"
        )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        return getattr(importlib.import_module(module), name)


@pytest.mark.parametrize("overlay", overlay_names())
def test_serve_config_v2_loads_into_ray_serves_schema(rendered: Rendered, overlay: str) -> None:
    serve_deploy_schema = ray_attr("ray.serve.schema", "ServeDeploySchema")
    for doc in by_kind(rendered[overlay], "RayService"):
        schema = serve_deploy_schema.model_validate(yaml.safe_load(doc["spec"]["serveConfigV2"]))
        assert [app.name for app in schema.applications] == [doc["metadata"]["name"]]


@pytest.mark.parametrize("overlay", overlay_names())
def test_serve_apps_args_load_into_the_builders_models(rendered: Rendered, overlay: str) -> None:
    pd_serving_args = ray_attr(
        "ray.llm._internal.serve.serving_patterns.prefill_decode.builder", "PDServingArgs"
    )
    llm_serving_args = ray_attr("ray.serve.llm", "LLMServingArgs")
    models = {"pd": pd_serving_args, "colocated": llm_serving_args}
    for doc in by_kind(rendered[overlay], "RayService"):
        for app in yaml.safe_load(doc["spec"]["serveConfigV2"])["applications"]:
            models[app["name"]].model_validate(app["args"])
