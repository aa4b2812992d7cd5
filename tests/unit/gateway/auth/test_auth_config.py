"""Where the key-hash secret comes from."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest
from pydantic import SecretStr

from gateway.auth.config import HASH_SECRET_ENV, AuthConfig, HashSecretError, resolve_hash_secret
from gateway.database import StorageConfig

PG = StorageConfig(url="postgresql://gw@db/gw")


def test_the_config_value_wins_over_the_environment() -> None:
    auth = AuthConfig(hash_secret=SecretStr("from-config-0123456789"))
    env = {HASH_SECRET_ENV: "from-env-0123456789"}
    assert resolve_hash_secret(auth, PG, env) == b"from-config-0123456789"
    assert resolve_hash_secret(AuthConfig(), PG, env) == b"from-env-0123456789"


def test_replicas_on_postgresql_must_be_given_a_secret() -> None:
    with pytest.raises(HashSecretError, match=HASH_SECRET_ENV):
        resolve_hash_secret(AuthConfig(), PG, {})


def test_a_short_secret_is_refused() -> None:
    with pytest.raises(HashSecretError, match="at least 16"):
        resolve_hash_secret(AuthConfig(), PG, {HASH_SECRET_ENV: "short"})


def test_sqlite_without_a_secret_makes_one_private_file_and_keeps_it(tmp_path: Path) -> None:
    storage = StorageConfig(url=f"sqlite:///{tmp_path}/data/gw.db")
    first = resolve_hash_secret(AuthConfig(), storage, {})
    second = resolve_hash_secret(AuthConfig(), storage, {})
    secret_file = tmp_path / "data" / "gw.key-hash-secret"
    assert first == second == secret_file.read_bytes().strip()
    assert len(first) == 64
    assert stat.S_IMODE(secret_file.stat().st_mode) == 0o600
    assert [p.name for p in secret_file.parent.iterdir()] == ["gw.key-hash-secret"]


def test_the_secret_never_shows_in_the_config_repr() -> None:
    auth = AuthConfig(hash_secret=SecretStr("from-config-0123456789"))
    assert "from-config" not in repr(auth)
