"""Storage shared by the gateway's stateful parts: SQLite (embedded) or PostgreSQL (replicas)."""

from gateway.storage.config import StorageConfig
from gateway.storage.database import Database
from gateway.storage.migrations import Migration, MigrationError

__all__ = ["Database", "Migration", "MigrationError", "StorageConfig"]
