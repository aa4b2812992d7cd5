"""The builders' own contract. Building an app with Ray's builders starts a Ray cluster (they
size deployments from it), so that runs for real in tests/e2e, where the local driver builds
both apps from the rendered Serve config with ``build_application``."""

from __future__ import annotations

import importlib
import importlib.util
import warnings
from pathlib import Path
from typing import Any

import pytest
import yaml

EXAMPLES = Path(__file__).parents[3] / "examples" / "serving"

pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("ray") is None,
    reason="ray is not installed (the serve-cpu extra); Ray's builders cannot run",
)


def builders() -> Any:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # Ray's own pydantic-v1 leftovers
        importlib.import_module("ray.serve.llm")
    return importlib.import_module("serve_app.builders")


def test_args_other_than_the_config_file_are_refused() -> None:
    with pytest.raises(ValueError, match="expected exactly"):
        builders().build_pd_app({"config": "x.yaml", "colour": "blue"})


def test_a_config_without_a_pd_pool_cannot_build_the_pd_app(tmp_path: Path) -> None:
    document = yaml.safe_load((EXAMPLES / "local-cpu.yaml").read_text())
    del document["pd"]
    only_colocated = tmp_path / "colocated.yaml"
    only_colocated.write_text(yaml.safe_dump(document))
    with pytest.raises(ValueError, match="pd: not configured"):
        builders().build_pd_app({"config": str(only_colocated)})
