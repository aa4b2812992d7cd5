"""Loading a serving config: the shared loader (YAML, ``${VAR}``, strict models), then the
cross-key checks of :mod:`serve_app.checks`, all problems reported at once::

    cfg = load_serving_config("examples/serving/qwen3.5-9b-g6.yaml")

The models (:mod:`serve_app.config`) know nothing of the checks and the checks import the models:
one direction, so neither module needs the other at import time.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from configkit import ConfigError, parse_model, read_yaml
from serve_app.checks import check_serving_config
from serve_app.config import ServingConfig

__all__ = ["ConfigError", "load_serving_config", "parse_serving_config", "validate_document"]


def parse_serving_config(document: Any, env: Mapping[str, str] | None = None) -> ServingConfig:
    """Validate a parsed document; raises :class:`ConfigError` listing every problem."""
    return _checked(parse_model(ServingConfig, document, env, what="serving config"))


def validate_document(data: dict[str, Any]) -> ServingConfig:
    """Validate an already interpolated document; raises :class:`ConfigError`."""
    return _checked(parse_model(ServingConfig, data, env={}, what="serving config"))


def _checked(config: ServingConfig) -> ServingConfig:
    problems = check_serving_config(config)
    if problems:
        raise ConfigError("\n".join(problems))
    return config


def load_serving_config(path: str | Path, env: Mapping[str, str] | None = None) -> ServingConfig:
    """Read, interpolate and validate a serving config file; raises :class:`ConfigError`."""
    return parse_serving_config(read_yaml(path), env)
