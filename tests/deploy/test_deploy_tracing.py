"""Ray Serve tracing on the clusters: every Ray pod loads serve_app's exporter hook, from the image
or from the ConfigMap the pods mount, and exports to the collector named in the environment."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.sdk.trace.export import BatchSpanProcessor

from serve_app.tracing import HOOK_PATH
from tests.deploy.k8s_policy import pod_specs
from tests.deploy.k8s_render import REPO_ROOT, by_kind, one, overlay_names

Rendered = dict[str, list[dict[str, Any]]]
HOOK_MOUNT = "/opt/pd-serve-hook/serve_app"


def ray_containers(doc: dict[str, Any]) -> list[tuple[str, dict[str, Any], dict[str, Any]]]:
    return [(where, spec, c) for where, spec in pod_specs(doc) for c in spec["containers"]]


@pytest.mark.parametrize("overlay", overlay_names())
def test_every_ray_pod_turns_serve_tracing_on(rendered: Rendered, overlay: str) -> None:
    docs = rendered[overlay]
    settings = one(docs, "ConfigMap", "ray-serve-tracing")["data"]
    assert settings["RAY_SERVE_TRACING_EXPORTER_IMPORT_PATH"] == HOOK_PATH
    assert float(settings["RAY_SERVE_TRACING_SAMPLING_RATIO"]) > 0
    assert settings["OTEL_EXPORTER_OTLP_ENDPOINT"].startswith(("http://", "https://"))
    assert settings["PYTHONPATH"].split(":")[0] == str(Path(HOOK_MOUNT).parent)
    rayservices = by_kind(docs, "RayService")
    assert {r["metadata"]["name"] for r in rayservices} == {"pd", "colocated"}
    for rayservice in rayservices:
        # Head (controller, proxy) and every worker group (replicas, proxies) alike.
        for where, spec, container in ray_containers(rayservice):
            refs = [e["configMapRef"]["name"] for e in container.get("envFrom", [])]
            assert "ray-serve-tracing" in refs, f"{where}: no Ray Serve tracing settings"
            mounts = {m["mountPath"]: m["name"] for m in container.get("volumeMounts", [])}
            volume = mounts.get(HOOK_MOUNT)
            assert volume is not None, f"{where}: the hook is not mounted at {HOOK_MOUNT}"
            sources = {v["name"]: v.get("configMap", {}).get("name") for v in spec["volumes"]}
            assert sources[volume] == "ray-serve-tracing-hook", where


@pytest.mark.parametrize("overlay", overlay_names())
def test_the_mounted_hook_is_serve_apps_and_exports_to_the_collector(
    rendered: Rendered, overlay: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    docs = rendered[overlay]
    mounted = one(docs, "ConfigMap", "ray-serve-tracing-hook")["data"]["tracing.py"]
    source = (REPO_ROOT / "serve_app" / "tracing.py").read_text()
    assert mounted.endswith(source), "stale: run python k8s/render_serve_configs.py"
    # Import the file as a pod would and call the hook with the pods' settings.
    path = tmp_path / "serve_app" / "tracing.py"
    path.parent.mkdir()
    path.write_text(mounted)
    spec = importlib.util.spec_from_file_location("mounted_serve_tracing_hook", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    settings = one(docs, "ConfigMap", "ray-serve-tracing")["data"]
    for name, value in settings.items():
        if name.startswith("OTEL_"):
            monkeypatch.setenv(name, value)
    monkeypatch.delenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", raising=False)
    (processor,) = module.span_processors_from_env()
    try:
        assert isinstance(processor, BatchSpanProcessor)
        exporter = processor._batch_processor._exporter
        expected = settings["OTEL_EXPORTER_OTLP_ENDPOINT"].rstrip("/") + "/v1/traces"
        assert exporter._endpoint == expected
    finally:
        processor.shutdown()
