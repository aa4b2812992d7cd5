"""A config that needs an extra that is not installed is refused with the command to install it."""

from __future__ import annotations

import pytest

from gateway import extras
from gateway.config import extras_problem, parse_config

CONFIG = {
    "pools": {"pd": {"urls": ["http://127.0.0.1:8000"]}},
    "models": {"m": {"pool": "pd"}},
    "limits": {"backend": "redis", "redis_url": "redis://127.0.0.1:6379/0"},
}


def test_an_installed_extra_is_no_problem() -> None:
    assert extras_problem(parse_config(CONFIG, env={})) is None  # dev installs every extra


def test_a_missing_extra_names_the_setting_and_the_install_command(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(extras.EXTRAS, "redis", ("redis", "no_such_module_of_redis"))
    problem = extras_problem(parse_config(CONFIG, env={}))
    assert problem is not None
    assert "limits.backend: redis" in problem and "no_such_module_of_redis" in problem
    assert "pip install 'pd-gateway[redis]'" in problem
    with pytest.raises(extras.MissingExtra, match=r"pd-gateway\[redis\]"):
        extras.require("redis", "limits.backend: redis")
