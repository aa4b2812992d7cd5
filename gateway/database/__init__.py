"""Storage shared by the gateway's stateful parts: SQLite (embedded) or PostgreSQL (replicas)."""

from gateway.database.config import StorageConfig
from gateway.database.database import Database
from gateway.database.migrations import Migration, MigrationError

__all__ = ["Database", "Migration", "MigrationError", "StorageConfig"]
