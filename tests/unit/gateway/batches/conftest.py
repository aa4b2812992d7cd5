from tests.storefixtures import database, migrated, postgres_server, storage_config

__all__ = ["database", "migrated", "postgres_server", "storage_config"]
