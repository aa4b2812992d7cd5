"""The ``auth`` section of the gateway config.

auth:
  enabled: true                              # false: no keys asked (tests not about auth)
  hash_secret: ${PD_GATEWAY_KEY_HASH_SECRET} # the HMAC secret keys are hashed under
  cache_seconds: 5                           # a revoked key is refused everywhere within this
  unknown_key_lookups_per_second: 20         # store reads for unknown key ids, then refused
  metrics_token: ${PD_GATEWAY_METRICS_TOKEN} # the scrape credential: opens /metrics, nothing else
  public_metrics: false                      # true: /metrics without a key, tenant series left out
  admin_api: true                            # serve /admin/ (admin keys only)
"""

from __future__ import annotations

import os
import secrets
from collections.abc import Mapping
from pathlib import Path

from pydantic import Field, SecretStr
from sqlalchemy.engine import make_url

from configkit import StrictModel
from gateway.database import StorageConfig

HASH_SECRET_ENV = "PD_GATEWAY_KEY_HASH_SECRET"  # noqa: S105 (a variable name)
MIN_SECRET_LENGTH = 16


class AuthConfig(StrictModel):
    enabled: bool = True
    hash_secret: SecretStr | None = None
    """Falls back to $PD_GATEWAY_KEY_HASH_SECRET; with SQLite and neither set, a secret file is
    made next to the database (fine for one machine; replicas on PostgreSQL must share one)."""
    cache_seconds: float = Field(5.0, gt=0, le=3600)
    """How long a key looked up in the store is trusted: the bound on revocation taking effect."""
    cache_max_entries: int = Field(100_000, ge=1)
    unknown_cache_max_entries: int = Field(10_000, ge=1)
    """Unknown key ids remembered (a negative cache), apart from the known keys."""
    unknown_key_lookups_per_second: float = Field(20.0, gt=0)
    """The failure budget: store reads that find no such key id, per second (burst: 5 s worth).
    Spent, unknown ids are refused without reading the store until it refills."""
    last_used_flush_seconds: float = Field(30.0, gt=0)
    metrics_token: SecretStr | None = Field(None, min_length=MIN_SECRET_LENGTH)
    """A dedicated scrape credential (``Authorization: Bearer <token>``, as Prometheus'
    ``authorization.credentials_file`` sends it): it reads ``/metrics`` whole and nothing else.
    Admin keys read it too."""
    public_metrics: bool = False
    """``/metrics`` without a credential too, but without any series labelled by tenant (a
    caller with an admin key or the scrape token still gets them). Private by default."""
    admin_api: bool = True


class HashSecretError(Exception):
    """No usable key-hash secret: the message says how to give one."""


def resolve_hash_secret(
    auth: AuthConfig, storage: StorageConfig, env: Mapping[str, str] | None = None
) -> bytes:
    """The HMAC secret: from the config, else the environment, else (SQLite only) a local file."""
    env = os.environ if env is None else env
    value = auth.hash_secret.get_secret_value() if auth.hash_secret else env.get(HASH_SECRET_ENV)
    if value:
        if len(value) < MIN_SECRET_LENGTH:
            raise HashSecretError(f"the key-hash secret must be at least {MIN_SECRET_LENGTH} chars")
        return value.encode()
    if storage.backend != "sqlite":
        raise HashSecretError(
            f"set auth.hash_secret or ${HASH_SECRET_ENV}: replicas sharing a PostgreSQL store "
            "must hash keys under the same secret"
        )
    return _local_secret_file(storage).read_bytes().strip()


def _local_secret_file(storage: StorageConfig) -> Path:
    database = make_url(storage.url).database
    assert database is not None
    path = Path(database).with_suffix(".key-hash-secret")
    if path.exists():
        return path
    path.parent.mkdir(parents=True, exist_ok=True)
    # Written aside then linked into place: two processes starting together agree on one secret.
    draft = path.with_name(f"{path.name}.{os.getpid()}.{secrets.token_hex(4)}")
    fd = os.open(draft, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(secrets.token_hex(32))
    try:
        os.link(draft, path)
    except FileExistsError:
        pass
    finally:
        draft.unlink()
    return path
