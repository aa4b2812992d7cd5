"""Strict models, environment interpolation and error rendering (see the package docstring)."""

from __future__ import annotations

import difflib
import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any, ClassVar, TypeVar

import yaml
from pydantic import BaseModel, ConfigDict, ValidationError, model_validator


class ConfigError(Exception):
    """A configuration that cannot be used; the message lists every problem with its key path."""


class StrictModel(BaseModel):
    """Frozen; unknown keys are errors, with the closest known key suggested."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    removed_keys: ClassVar[Mapping[str, str]] = {}
    """Keys that once existed, with what to write instead."""

    @model_validator(mode="before")
    @classmethod
    def _unknown_keys_suggest(cls, data: Any) -> Any:
        if isinstance(data, dict):
            known = set(cls.model_fields) | {
                f.alias for f in cls.model_fields.values() if f.alias is not None
            }
            for key in data:
                if key in cls.removed_keys:
                    raise ValueError(f"{key}: {cls.removed_keys[key]}")
                if key not in known:
                    close = difflib.get_close_matches(str(key), sorted(known), n=1)
                    hint = f" (did you mean {close[0]!r}?)" if close else ""
                    raise ValueError(f"{key}: unknown key{hint}")
        return data


_ENV_REF = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}")


def interpolate_env(value: Any, env: Mapping[str, str], path: str = "") -> Any:
    """Replace ``${VAR}`` / ``${VAR:-default}`` in every string of a parsed YAML document."""
    if isinstance(value, dict):
        return {
            k: interpolate_env(v, env, f"{path}.{k}" if path else str(k)) for k, v in value.items()
        }
    if isinstance(value, list):
        return [interpolate_env(v, env, f"{path}[{i}]") for i, v in enumerate(value)]
    if isinstance(value, str):

        def substitute(match: re.Match[str]) -> str:
            name, default = match.group(1), match.group(2)
            if name in env:
                return env[name]
            if default is not None:
                return default
            raise ConfigError(f"{path}: environment variable {name} is not set")

        return _ENV_REF.sub(substitute, value)
    return value


def format_validation_error(err: ValidationError) -> str:
    """One line per problem, each starting with the dotted path of the key at fault.

    Pydantic's own messages get a lower-case first letter and are otherwise kept as written
    (lower-casing them whole would mangle the pool names and URLs they quote); the checks of our
    models start each line with the key at fault, relative to where they run, and a check of the
    top-level model has no prefix at all.
    """
    lines = []
    for e in err.errors():
        where = _path(e["loc"])
        message = str(e["msg"]).removeprefix("Value error, ")
        if e["type"] != "value_error":
            message = message[:1].lower() + message[1:]
            lines.append(f"{where}: {message}" if where else message)
            continue
        lines.extend(_under(where, line) for line in message.splitlines())
    return "\n".join(lines)


_KEY_FIRST = re.compile(r"[\w\-]+(\.[\w\-]+|\[\d+\])*: ")


def _under(where: str, line: str) -> str:
    """A check's line placed under the key it ran at: ``key: ...`` lines name a key inside."""
    if not where:
        return line
    return f"{where}.{line}" if _KEY_FIRST.match(line) else f"{where}: {line}"


def _path(loc: tuple[int | str, ...]) -> str:
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += f".{part}" if out else str(part)
    return out


ModelT = TypeVar("ModelT", bound=BaseModel)


def parse_model(
    model: type[ModelT], document: Any, env: Mapping[str, str] | None = None, what: str = "config"
) -> ModelT:
    """Validate a parsed document (after interpolation); raises :class:`ConfigError`."""
    if not isinstance(document, dict):
        raise ConfigError(f"the {what} must be a mapping at the top level")
    data = interpolate_env(document, os.environ if env is None else env)
    try:
        return model.model_validate(data)
    except ValidationError as err:
        raise ConfigError(format_validation_error(err)) from None


def read_yaml(path: str | Path) -> Any:
    """The parsed YAML document of a file; raises :class:`ConfigError` naming the file."""
    try:
        text = Path(path).read_text()
    except OSError as err:
        raise ConfigError(f"{path}: {err.strerror}") from None
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as err:
        raise ConfigError(f"{path}: not valid YAML: {err}") from None


def load_model(
    model: type[ModelT],
    path: str | Path,
    env: Mapping[str, str] | None = None,
    what: str = "config",
) -> ModelT:
    """Read, interpolate and validate a config file."""
    return parse_model(model, read_yaml(path), env, what)
