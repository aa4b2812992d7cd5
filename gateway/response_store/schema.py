"""The ``stored_responses`` table: one row per stored response, its JSON beside its owner.

``input_items`` is the whole conversation the response was made from (the earlier turns'
inputs and outputs first), so reading or continuing a response is one row whatever the length
of its chain, and an expired or deleted ancestor breaks nothing. ``tenant_id`` is '' for the one
anonymous caller of a gateway without keys; every read names it.
"""

from __future__ import annotations

from sqlalchemy import BigInteger, Column, Float, MetaData, Table, Text

from gateway.database.migrations import Migration

RESPONSES_MIGRATIONS = (
    Migration(
        "responses",
        1,
        "stored responses: the response, its conversation, owner and expiry",
        (
            """CREATE TABLE stored_responses (
                id TEXT PRIMARY KEY,
                tenant_id TEXT NOT NULL,
                key_id TEXT,
                created_at DOUBLE PRECISION NOT NULL,
                expires_at DOUBLE PRECISION NOT NULL,
                status TEXT NOT NULL,
                previous_response_id TEXT,
                size_bytes BIGINT NOT NULL,
                response TEXT NOT NULL,
                input_items TEXT NOT NULL
            )""",
            "CREATE INDEX stored_responses_by_tenant ON stored_responses (tenant_id, created_at)",
            "CREATE INDEX stored_responses_by_expiry ON stored_responses (expires_at)",
        ),
    ),
)

metadata = MetaData()

stored_responses = Table(
    "stored_responses",
    metadata,
    Column("id", Text, primary_key=True),
    Column("tenant_id", Text, nullable=False),
    Column("key_id", Text),
    Column("created_at", Float, nullable=False),
    Column("expires_at", Float, nullable=False),
    Column("status", Text, nullable=False),
    Column("previous_response_id", Text),
    Column("size_bytes", BigInteger, nullable=False),
    Column("response", Text, nullable=False),
    Column("input_items", Text, nullable=False),
)
