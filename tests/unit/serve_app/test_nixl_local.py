"""The local-only NIXL plugin, in a fresh interpreter as vLLM would load it."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys

import pytest

from serve_app.nixl_local import ENV

pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("nixl") is None, reason="nixl is not installed (serve-cpu extra)"
)

PROBE = """
import importlib.metadata
plugin = next(e for e in importlib.metadata.entry_points(group="vllm.general_plugins")
              if e.value == "serve_app.nixl_local:register")
plugin.load()()
plugin.load()()  # vLLM may load plugins more than once per process
from nixl._api import nixl_agent_config
print(nixl_agent_config(num_threads=4).enable_pthread,
      nixl_agent_config(enable_prog_thread=True).enable_pthread)
"""


def probe(env_value: str | None) -> str:
    env = {k: v for k, v in os.environ.items() if k != ENV}
    if env_value is not None:
        env[ENV] = env_value
    result = subprocess.run(
        [sys.executable, "-c", PROBE], env=env, capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr
    return result.stdout.strip().splitlines()[-1]


def test_registered_with_vllm_and_turns_the_progress_thread_off() -> None:
    assert probe("0") == "False True"  # an explicit choice still wins


def test_inert_without_the_local_profiles_setting() -> None:
    assert probe(None) == "True True"
