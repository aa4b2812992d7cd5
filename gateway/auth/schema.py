"""Tenants, tenant keys and admin keys: the migrations that build them and the tables to query.

Times are UNIX seconds (DOUBLE PRECISION); model lists, limits and labels are JSON text, so one
schema serves SQLite and PostgreSQL alike. ``allowed_models`` NULL means every model.
Only an HMAC of each key's secret is stored (``secret_hash``, hex).
"""

from __future__ import annotations

from sqlalchemy import Boolean, Column, Float, ForeignKey, MetaData, Table, Text

from gateway.database.migrations import Migration

AUTH_MIGRATIONS = (
    Migration(
        "auth",
        1,
        "tenants, tenant keys, admin keys",
        (
            """CREATE TABLE tenants (
                id TEXT PRIMARY KEY,
                name TEXT NOT NULL,
                allowed_models TEXT,
                limits TEXT NOT NULL DEFAULT '{}',
                labels TEXT NOT NULL DEFAULT '{}',
                enabled BOOLEAN NOT NULL DEFAULT TRUE,
                created_at DOUBLE PRECISION NOT NULL,
                updated_at DOUBLE PRECISION NOT NULL
            )""",
            """CREATE TABLE api_keys (
                id TEXT PRIMARY KEY,
                tenant_id TEXT NOT NULL REFERENCES tenants (id),
                name TEXT NOT NULL,
                secret_hash TEXT NOT NULL,
                allowed_models TEXT,
                limits TEXT NOT NULL DEFAULT '{}',
                expires_at DOUBLE PRECISION,
                revoked_at DOUBLE PRECISION,
                created_at DOUBLE PRECISION NOT NULL,
                last_used_at DOUBLE PRECISION
            )""",
            "CREATE INDEX api_keys_by_tenant ON api_keys (tenant_id)",
            """CREATE TABLE admin_keys (
                id TEXT PRIMARY KEY,
                name TEXT NOT NULL,
                secret_hash TEXT NOT NULL,
                revoked_at DOUBLE PRECISION,
                created_at DOUBLE PRECISION NOT NULL,
                last_used_at DOUBLE PRECISION
            )""",
        ),
    ),
    Migration(
        "auth",
        2,
        "key rotation: the previous secret stays valid for a grace period",
        (
            "ALTER TABLE api_keys ADD COLUMN previous_secret_hash TEXT",
            "ALTER TABLE api_keys ADD COLUMN previous_secret_expires_at DOUBLE PRECISION",
        ),
    ),
)

# The current shape, for queries (SQLAlchemy Core). Keep in step with the migrations above.
metadata = MetaData()

tenants = Table(
    "tenants",
    metadata,
    Column("id", Text, primary_key=True),
    Column("name", Text, nullable=False),
    Column("allowed_models", Text),
    Column("limits", Text, nullable=False),
    Column("labels", Text, nullable=False),
    Column("enabled", Boolean, nullable=False),
    Column("created_at", Float, nullable=False),
    Column("updated_at", Float, nullable=False),
)

api_keys = Table(
    "api_keys",
    metadata,
    Column("id", Text, primary_key=True),
    Column("tenant_id", Text, ForeignKey("tenants.id"), nullable=False),
    Column("name", Text, nullable=False),
    Column("secret_hash", Text, nullable=False),
    Column("allowed_models", Text),
    Column("limits", Text, nullable=False),
    Column("expires_at", Float),
    Column("revoked_at", Float),
    Column("created_at", Float, nullable=False),
    Column("last_used_at", Float),
    Column("previous_secret_hash", Text),
    Column("previous_secret_expires_at", Float),
)

admin_keys = Table(
    "admin_keys",
    metadata,
    Column("id", Text, primary_key=True),
    Column("name", Text, nullable=False),
    Column("secret_hash", Text, nullable=False),
    Column("revoked_at", Float),
    Column("created_at", Float, nullable=False),
    Column("last_used_at", Float),
)
