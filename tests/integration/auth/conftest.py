"""A simulator serving two models, and helpers to run gateways with keys on and manage keys."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.simproc import SimProcess, start_sim

HASH_SECRET = "integration-test-hash-secret-0123456789"
ENV = {"PD_GATEWAY_KEY_HASH_SECRET": HASH_SECRET}
MODELS = ("alpha", "beta")


@pytest.fixture(scope="package")
def sim() -> Iterator[SimProcess]:
    with start_sim("--no-delay", *(arg for m in MODELS for arg in ("--model", m))) as process:
        yield process


def auth_gateway_config(sim_url: str, database_url: str, **auth: Any) -> dict[str, Any]:
    # One failed probe takes the replica out until the next, and the package shares one
    # simulator: on a loaded machine a 0.5 s probe timed out and a request got a 503 "pool sim
    # unavailable" (the suite at load ~20); these tests are not about health checks.
    return {
        "server": {"log_level": "debug"},  # the most talkative logs, for the secrets scan
        "pools": {"sim": {"urls": [sim_url], "health": {"interval": 0.5, "timeout": 5.0}}},
        "models": {m: {"pool": "sim"} for m in MODELS},
        "storage": {"url": database_url},
        "auth": {"enabled": True, **auth},
    }


def cli(database_url: str, *args: str) -> str:
    """``pd-gateway <args> --database-url URL`` as a real process; its stdout."""
    result = subprocess.run(
        [sys.executable, "-m", "gateway", *args, "--database-url", database_url],
        capture_output=True,
        text=True,
        env={**os.environ, **ENV},
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    return result.stdout.strip()


def admin_key(database_url: str) -> str:
    return cli(database_url, "admin-keys", "create", "--name", "tests", "--print-secret-only")


class Admin:
    """The /admin/ API as an operator calls it."""

    def __init__(self, url: str, key: str) -> None:
        self.client = httpx.Client(
            base_url=url + "/admin", headers={"Authorization": f"Bearer {key}"}, timeout=10
        )

    def post(self, path: str, body: dict[str, Any] | None = None) -> dict[str, Any]:
        response = self.client.post(path, json=body or {})
        assert response.status_code in (200, 201), response.text
        data: dict[str, Any] = response.json()
        return data

    def get(self, path: str) -> dict[str, Any]:
        response = self.client.get(path)
        assert response.status_code == 200, response.text
        data: dict[str, Any] = response.json()
        return data

    def close(self) -> None:
        self.client.close()
