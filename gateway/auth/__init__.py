"""Multi-tenant API keys: key format and hashing, the key store, the cache, the middleware."""
