"""The ``accounting`` section: the usage ledger's batching."""

from __future__ import annotations

from pydantic import Field

from configkit import StrictModel


class AccountingConfig(StrictModel):
    """``ledger: false`` keeps no usage rows (the counters and metrics still run)."""

    ledger: bool = True
    ledger_batch_size: int = Field(500, ge=1)
    ledger_interval: float = Field(0.5, gt=0)
    """Seconds between batch writes: a row reaches the store within about this long."""
    ledger_close_timeout: float = Field(20.0, ge=0)
    ledger_max_buffered: int = Field(50_000, ge=1)
    """Rows kept in memory while the store is down; older ones spill to ``ledger_spill_path``."""
    ledger_spill_path: str | None = None
    """A local file (JSON lines) for rows beyond ``ledger_max_buffered``, written back once the
    store answers, also after a restart. Without it rows stay in memory (unbounded; logged)."""
    """At shutdown, how long to keep retrying a failing store before giving rows up."""
    prices_sync_seconds: float = Field(5.0, gt=0, le=3600)
    """How often each replica reads the prices set through the admin API from the store: a
    price set through one replica prices the others' rows within about this long."""
