"""Configuration of flow control: the gateway's queue for requests no pool has room for::

    flow:
      enabled: true
      max_queued: 256
      max_queued_bytes: 67108864
      max_wait_seconds: 10
      bands:                       # highest priority first
        - {name: interactive}
        - {name: standard}
        - {name: batch, sheddable: true}
      default_band: standard
      tenant_bands: {acme: interactive}

A key's label ``priority`` names its band (over its tenant's, over ``default_band``); a client's
``x-gateway-priority`` header may name a lower band, never a higher one.
"""

from __future__ import annotations

from pydantic import Field, model_validator

from configkit import StrictModel


class BandConfig(StrictModel):
    name: str = Field(pattern=r"^[a-z][a-z0-9_-]{0,31}$")
    sheddable: bool = False
    """Refused at once (429 ``shed``) while no pool has room, instead of queued."""


class ReserveConfig(StrictModel):
    """What the tenant holding the most places may not take (see ``FlowConfig.reserve``)."""

    places: int = Field(0, ge=0)
    """Of each pool's ``capacity``."""
    starting: int = Field(0, ge=0)
    """Of each pool's ``saturation.max_starting``."""


class FlowConfig(StrictModel):
    enabled: bool = False
    max_queued: int = Field(256, ge=0)
    """Requests waiting at once; past it the lowest band's newest gives way, or the new one
    is refused (503 ``queue_full``)."""
    max_queued_bytes: int = Field(64 * 1024 * 1024, ge=0)
    """Request bodies held while waiting, in bytes (the same rule)."""
    max_wait_seconds: float = Field(10.0, gt=0)
    """Past this a waiting request is refused (503 ``queue_timeout``, with ``retry-after``)."""
    recheck_seconds: float = Field(0.05, gt=0)
    """While requests wait, how often the pools' saturation is looked at again (the engines'
    gauges change without a request ending)."""
    retry_after_seconds: int = Field(1, ge=0)
    bands: tuple[BandConfig, ...] = (
        BandConfig(name="interactive"),
        BandConfig(name="standard"),
        BandConfig(name="sheddable", sheddable=True),
    )
    default_band: str = "standard"
    tenant_bands: dict[str, str] = Field(default_factory=dict)
    """Tenant id -> band, for keys without their own ``priority`` label."""
    reserve: ReserveConfig = ReserveConfig()
    """Places kept from the tenant holding the most requests through the gateway (ties: each
    of them), so another tenant's request finds one free at once instead of waiting for one to
    free. Not work-conserving: a tenant alone runs on ``capacity - places``. Off (0) by default;
    README, "Two tenants through one gateway", measures what it buys and costs."""

    @model_validator(mode="after")
    def _bands_known(self) -> FlowConfig:
        names = [b.name for b in self.bands]
        if not names:
            raise ValueError("bands: name at least one band")
        if len(set(names)) != len(names):
            raise ValueError("bands: names must be unique")
        for where, band in [("default_band", self.default_band), *self.tenant_bands.items()]:
            if band not in names:
                raise ValueError(f"{where}: unknown band {band!r} (known: {', '.join(names)})")
        return self
