"""The ``storage`` section of the gateway config: where keys (and the usage ledger) are kept.

storage:
  url: sqlite:///data/pd-gateway.db          # the embedded default: one file, no server
  # url: ${DATABASE_URL}                     # postgresql://user:pass@host:5432/db for replicas
"""

from __future__ import annotations

from pydantic import Field, field_validator
from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError

from configkit import StrictModel

DEFAULT_URL = "sqlite:///data/pd-gateway.db"
SQLITE_SCHEMES = ("sqlite",)
POSTGRES_SCHEMES = ("postgresql", "postgres")


class StorageConfig(StrictModel):
    url: str = Field(DEFAULT_URL, repr=False)
    """``sqlite:///relative/or//absolute/path.db`` or ``postgresql://user:pass@host/db``. Not in
    the repr: it may carry a password."""
    migrate_on_start: bool = True
    """Bring the schema up to date when the gateway starts (``pd-gateway db migrate`` otherwise)."""
    pool_size: int = Field(5, ge=1, le=100)
    """PostgreSQL: connections kept open per gateway process."""
    max_overflow: int | None = Field(None, ge=0, le=100)
    """PostgreSQL: connections opened beyond ``pool_size`` under load (default: ``pool_size``)."""
    pool_timeout: float = Field(10.0, gt=0)
    """PostgreSQL: seconds to wait for a free connection before the store counts as unavailable."""
    pool_recycle: float = Field(1800.0, gt=0)
    """PostgreSQL: seconds after which a connection is replaced (server-side idle limits)."""
    connect_timeout: float = Field(10.0, gt=0)

    @field_validator("url")
    @classmethod
    def _known_backend(cls, url: str) -> str:
        try:
            parsed = make_url(url)
        except ArgumentError:
            raise ValueError("not a database URL (sqlite:///path or postgresql://...)") from None
        scheme = parsed.drivername.split("+", 1)[0]
        if scheme in SQLITE_SCHEMES:
            if not parsed.database or parsed.database == ":memory:":
                raise ValueError("a SQLite store needs a file path: sqlite:///path/to/file.db")
        elif scheme not in POSTGRES_SCHEMES:
            raise ValueError(f"unsupported database {scheme!r}: use sqlite or postgresql")
        return url

    @property
    def backend(self) -> str:
        """``sqlite`` or ``postgresql``."""
        scheme = make_url(self.url).drivername.split("+", 1)[0]
        return "sqlite" if scheme in SQLITE_SCHEMES else "postgresql"

    def display_url(self) -> str:
        """The URL with any password masked, for logs and messages."""
        return make_url(self.url).render_as_string(hide_password=True)
