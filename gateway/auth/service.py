"""Everything authentication needs at run time, built once from the config and the shared store.

auth = AuthService.build(config.auth, config.storage, database)
await auth.start()   # the last-used flusher
principal = await auth.authenticator.tenant(token)
await auth.stop()
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from gateway.auth.authenticator import Authenticator
from gateway.auth.config import AuthConfig, resolve_hash_secret
from gateway.auth.keys import KeyHasher
from gateway.auth.manage import KeyManager
from gateway.auth.store import AuthStore
from gateway.clock import SYSTEM_CLOCK, Clock
from gateway.database import Database, StorageConfig

logger = logging.getLogger(__name__)


@dataclass(slots=True)
class AuthService:
    config: AuthConfig
    store: AuthStore
    authenticator: Authenticator
    manager: KeyManager

    @classmethod
    def build(
        cls,
        auth: AuthConfig,
        storage: StorageConfig,
        database: Database,
        clock: Clock = SYSTEM_CLOCK,
    ) -> AuthService:
        """Raises HashSecretError when no key-hash secret can be found."""
        hasher = KeyHasher(resolve_hash_secret(auth, storage))
        store = AuthStore(database)
        authenticator = Authenticator(store, hasher, auth, clock.wall, clock.monotonic)
        return cls(auth, store, authenticator, KeyManager(store, hasher, clock.wall))

    async def start(self) -> None:
        await self.authenticator.start()

    async def stop(self) -> None:
        await self.authenticator.stop()


def build_auth(
    auth: AuthConfig, storage: StorageConfig, database: Database, clock: Clock = SYSTEM_CLOCK
) -> AuthService | None:
    """The service, or None when ``auth.enabled`` is false (no keys asked, every model visible)."""
    if not auth.enabled:
        logger.warning("authentication is off (auth.enabled: false): every caller is anonymous")
        return None
    return AuthService.build(auth, storage, database, clock)
