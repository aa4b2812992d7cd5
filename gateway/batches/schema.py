"""The Batch API's tables: files, batches and each batch's lines, in the ledger's store.

``batch_files`` holds a file's bytes beside its owner (input files as uploaded, output and
error files as built when a batch finishes). ``batch_lines`` is the durable progress: one row
per input line, ``queued`` until a runner claims it (``claimed``, with its ``owner`` and
``lease_until``), ``done`` once its answer and its ledger row are written, in one transaction.
A claim whose lease ran out is taken again by any replica: a line whose replica died runs once
more, and only a finished one is never run again.
"""

from __future__ import annotations

from sqlalchemy import BigInteger, Boolean, Column, Float, Integer, MetaData, Table, Text

from gateway.database.migrations import Migration

BATCH_MIGRATIONS = (
    Migration(
        "batches",
        1,
        "batch files, batches and their lines",
        (
            """CREATE TABLE batch_files (
                id TEXT PRIMARY KEY,
                tenant_id TEXT NOT NULL,
                purpose TEXT NOT NULL,
                filename TEXT NOT NULL,
                bytes BIGINT NOT NULL,
                lines INTEGER NOT NULL,
                created_at DOUBLE PRECISION NOT NULL,
                expires_at DOUBLE PRECISION NOT NULL,
                content TEXT NOT NULL
            )""",
            "CREATE INDEX batch_files_by_tenant ON batch_files (tenant_id, created_at)",
            "CREATE INDEX batch_files_by_expiry ON batch_files (expires_at)",
            """CREATE TABLE batches (
                id TEXT PRIMARY KEY,
                tenant_id TEXT NOT NULL,
                key_id TEXT,
                endpoint TEXT NOT NULL,
                input_file_id TEXT NOT NULL,
                completion_window TEXT NOT NULL,
                status TEXT NOT NULL,
                created_at DOUBLE PRECISION NOT NULL,
                expires_at DOUBLE PRECISION NOT NULL,
                in_progress_at DOUBLE PRECISION,
                finalizing_at DOUBLE PRECISION,
                completed_at DOUBLE PRECISION,
                failed_at DOUBLE PRECISION,
                expired_at DOUBLE PRECISION,
                cancelling_at DOUBLE PRECISION,
                cancelled_at DOUBLE PRECISION,
                total INTEGER NOT NULL,
                completed INTEGER NOT NULL,
                failed INTEGER NOT NULL,
                output_file_id TEXT,
                error_file_id TEXT,
                metadata TEXT,
                errors TEXT,
                model TEXT
            )""",
            "CREATE INDEX batches_by_tenant ON batches (tenant_id, created_at)",
            "CREATE INDEX batches_by_status ON batches (status)",
            """CREATE TABLE batch_lines (
                batch_id TEXT NOT NULL,
                line INTEGER NOT NULL,
                custom_id TEXT NOT NULL,
                body TEXT NOT NULL,
                state TEXT NOT NULL,
                owner TEXT,
                lease_until DOUBLE PRECISION,
                request_id TEXT,
                status_code INTEGER,
                failed BOOLEAN,
                result TEXT,
                PRIMARY KEY (batch_id, line)
            )""",
            "CREATE INDEX batch_lines_by_state ON batch_lines (state, batch_id, line)",
        ),
    ),
)

metadata = MetaData()

batch_files = Table(
    "batch_files",
    metadata,
    Column("id", Text, primary_key=True),
    Column("tenant_id", Text, nullable=False),
    Column("purpose", Text, nullable=False),
    Column("filename", Text, nullable=False),
    Column("bytes", BigInteger, nullable=False),
    Column("lines", Integer, nullable=False),
    Column("created_at", Float, nullable=False),
    Column("expires_at", Float, nullable=False),
    Column("content", Text, nullable=False),
)

batches = Table(
    "batches",
    metadata,
    Column("id", Text, primary_key=True),
    Column("tenant_id", Text, nullable=False),
    Column("key_id", Text),
    Column("endpoint", Text, nullable=False),
    Column("input_file_id", Text, nullable=False),
    Column("completion_window", Text, nullable=False),
    Column("status", Text, nullable=False),
    Column("created_at", Float, nullable=False),
    Column("expires_at", Float, nullable=False),
    *(
        Column(f"{stamp}_at", Float)
        for stamp in (
            "in_progress",
            "finalizing",
            "completed",
            "failed",
            "expired",
            "cancelling",
            "cancelled",
        )
    ),
    Column("total", Integer, nullable=False),
    Column("completed", Integer, nullable=False),
    Column("failed", Integer, nullable=False),
    Column("output_file_id", Text),
    Column("error_file_id", Text),
    Column("metadata", Text),
    Column("errors", Text),
    Column("model", Text),
)

batch_lines = Table(
    "batch_lines",
    metadata,
    Column("batch_id", Text, primary_key=True),
    Column("line", Integer, primary_key=True),
    Column("custom_id", Text, nullable=False),
    Column("body", Text, nullable=False),
    Column("state", Text, nullable=False),
    Column("owner", Text),
    Column("lease_until", Float),
    Column("request_id", Text),
    Column("status_code", Integer),
    Column("failed", Boolean),
    Column("result", Text),
)
