"""``pd-gateway tenants|keys|admin-keys|db`` as real processes against a fresh store."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import yaml

from tests.integration.auth.conftest import ENV, cli


def _fails(database_url: str, *args: str) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(
        [sys.executable, "-m", "gateway", *args, "--database-url", database_url],
        capture_output=True, text=True, env={**os.environ, **ENV}, timeout=120,
    )  # fmt: skip
    assert result.returncode == 1, result
    return result


def test_the_store_commands_end_to_end(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/cli.db"
    tenant = json.loads(cli(url, "tenants", "create", "acme", "--models", "alpha,beta",
                            "--requests-per-minute", "60", "--label", "team=search"))  # fmt: skip
    assert tenant["allowed_models"] == ["alpha", "beta"]
    assert tenant["limits"] == {"requests_per_minute": 60}
    assert tenant["labels"] == {"team": "search"}

    duplicate = _fails(url, "tenants", "create", "acme")
    assert duplicate.stdout == "" and "already exists" in duplicate.stderr
    wider = _fails(url, "keys", "create", "--tenant", "acme", "--name", "k", "--models", "gamma")
    assert "gamma" in wider.stderr

    issued = json.loads(cli(url, "keys", "create", "--tenant", "acme", "--name", "ci"))
    secret = issued["key"].rsplit("-", 1)[1]
    listed = cli(url, "keys", "list", "--tenant", "acme")
    assert issued["id"] in listed and secret not in listed

    rotated = cli(url, "keys", "rotate", issued["id"], "--grace-seconds", "30",
                  "--print-secret-only")  # fmt: skip
    assert rotated.startswith(f"sk-pdg-{issued['id']}-") and rotated != issued["key"]
    assert json.loads(cli(url, "keys", "revoke", issued["id"]))["revoked"] is True

    admin = cli(url, "admin-keys", "create", "--name", "ops", "--print-secret-only")
    assert admin.startswith("sk-pdgadmin-")
    assert admin.rsplit("-", 1)[1] not in cli(url, "admin-keys", "list")
    assert json.loads(cli(url, "tenants", "disable", "acme"))["enabled"] is False
    assert json.loads(cli(url, "db", "status"))["schema_versions"]["auth"] >= 2
    assert json.loads(cli(url, "db", "migrate"))["applied"] == []


def test_the_config_file_names_the_store_and_the_secret(tmp_path: Path) -> None:
    config = {
        "pools": {"p": {"urls": ["http://127.0.0.1:9"]}},
        "models": {"m": {"pool": "p"}},
        "storage": {"url": f"sqlite:///{tmp_path}/from-config.db"},
        "auth": {"hash_secret": "${PD_GATEWAY_KEY_HASH_SECRET}"},
    }
    path = tmp_path / "gateway.yaml"
    path.write_text(yaml.safe_dump(config))
    result = subprocess.run(
        [sys.executable, "-m", "gateway", "tenants", "create", "t1", "--config", str(path)],
        capture_output=True, text=True, env={**os.environ, **ENV}, timeout=120,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "from-config.db").exists()
    assert not (tmp_path / "from-config.key-hash-secret").exists()  # the secret came from env
