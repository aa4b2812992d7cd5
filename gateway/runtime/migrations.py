"""Every component's migrations, listed once: the store is migrated with all of them together."""

from __future__ import annotations

from gateway.accounting.ledger_sql import LEDGER_MIGRATIONS
from gateway.accounting.price_store import PRICES_MIGRATIONS
from gateway.auth.schema import AUTH_MIGRATIONS
from gateway.batches.schema import BATCH_MIGRATIONS
from gateway.database.migrations import Migration
from gateway.response_store.schema import RESPONSES_MIGRATIONS


def all_migrations() -> tuple[Migration, ...]:
    """A component that keeps rows in the store adds its migrations tuple here."""
    return (
        *AUTH_MIGRATIONS,
        *LEDGER_MIGRATIONS,
        *RESPONSES_MIGRATIONS,
        *BATCH_MIGRATIONS,
        *PRICES_MIGRATIONS,
    )
