"""The one configuration loader both packages use: YAML, ``${VAR}`` interpolation, strict models
and error messages that name the key at fault (with a "did you mean" for typos).

``gateway`` and ``serve_app`` never import each other; both import this small leaf package, so the
rules for a config file (unknown keys are errors, secrets come from the environment, every problem
is reported with its path) are written once and cannot drift::

    class PoolConfig(StrictModel):
        urls: tuple[str, ...]

    config = load_model(PoolConfig, "pool.yaml")      # or parse_model(PoolConfig, document)
"""

from configkit.loader import (
    ConfigError,
    StrictModel,
    format_validation_error,
    interpolate_env,
    load_model,
    parse_model,
    read_yaml,
)

__all__ = [
    "ConfigError",
    "StrictModel",
    "format_validation_error",
    "interpolate_env",
    "load_model",
    "parse_model",
    "read_yaml",
]
