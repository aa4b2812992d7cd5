"""``load_sharing``: where the load book's figures are shared between gateway replicas.

Its own section and its own Redis client, apart from the rate limits' (``limits``): the load is
routing's, and a deployment may share one without the other::

    load_sharing:
      backend: redis               # local (the default): each gateway replica counts alone
      redis_url: redis://redis:6379/0
      key_prefix: pdgw:load
      interval_seconds: 0.1        # the exchange's period while nothing changes
      max_age_seconds: 2.0         # a gateway silent this long no longer counts
      max_hints: 4096              # prefix hints sent or read per exchange, at most
      timeout_seconds: 0.25        # one Redis call; past it the gateway's own view stands
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from configkit import StrictModel


class LoadSharingConfig(StrictModel):
    backend: Literal["local", "redis"] = "local"
    redis_url: str | None = None
    key_prefix: str = Field("pdgw:load", min_length=1, max_length=64)
    interval_seconds: float = Field(0.1, gt=0, le=60)
    """Every gateway replica sends its figures at least this often (and as soon as one of
    them changes, one exchange at a time)."""
    max_age_seconds: float = Field(2.0, gt=0, le=600)
    """Another replica's figures older than this are dropped (it died or lost Redis)."""
    max_hints: int = Field(4096, ge=0, le=1_000_000)
    """Prefix hints (a prompt's block names and the replica sent them) sent per exchange and
    kept in Redis per pool, at most; 0: not shared."""
    timeout_seconds: float = Field(0.25, gt=0, le=10)
    """One Redis call's deadline: past it, the gateway's own figures stand alone."""

    @model_validator(mode="after")
    def _redis_needs_url(self) -> LoadSharingConfig:
        if self.backend == "redis" and not self.redis_url:
            raise ValueError("redis_url: required when backend is redis")
        if self.max_age_seconds <= self.interval_seconds:
            raise ValueError(
                "max_age_seconds: must be longer than interval_seconds, or every other "
                "replica's figures would be dropped before the next exchange"
            )
        return self
