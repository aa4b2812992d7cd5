"""Authentication: a presented key -> a Principal (tenant keys) or an AdminKey (admin keys).

Every failure is the same 401 ``invalid_api_key`` whatever the cause (unknown, wrong secret,
revoked, expired, tenant disabled, malformed), so a caller learns nothing about which keys exist;
only a *missing* key gets its own message. Tenant and admin keys are checked against credential
caches (the warm path: a dict lookup and one HMAC), with the same revocation bound; unknown ids
are cached apart and their store reads limited by a failure budget (``cache.py``).

    auth = Authenticator(AuthStore(db), KeyHasher(secret), AuthConfig())
    await auth.start()
    principal = await auth.tenant(token)
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

from sqlalchemy.exc import SQLAlchemyError

from gateway.auth.cache import CredentialCache
from gateway.auth.config import AuthConfig
from gateway.auth.credentials import Credential, credential_for
from gateway.auth.keys import KeyHasher, KeyKind, PresentedKey, parse_key
from gateway.auth.models import AdminKey, Principal
from gateway.auth.store import AuthStore
from gateway.clock import Reading
from gateway.errors import AuthenticationFailed, KeyStoreUnavailable, PermissionDenied

logger = logging.getLogger(__name__)

MISSING_KEY = (
    "You didn't provide an API key. Provide it in an Authorization header using Bearer auth "
    "(Authorization: Bearer YOUR_KEY) or in an api-key header."
)
INVALID_KEY = "Incorrect API key provided."
REREAD_SECONDS = 1.0
_NO_HASH = "0" * 64
ADMIN_ONLY = "This route needs an admin key; tenant keys cannot use it."
V = TypeVar("V")


class Authenticator:
    def __init__(
        self,
        store: AuthStore,
        hasher: KeyHasher,
        config: AuthConfig,
        clock: Reading = time.time,
        monotonic: Reading = time.monotonic,
    ) -> None:
        self.store = store
        self.hasher = hasher
        self.config = config
        self.clock = clock
        self.cache: CredentialCache[Credential] = self._cache(self._load, monotonic)
        self.admin_cache: CredentialCache[AdminKey] = self._cache(self._load_admin, monotonic)
        self._used: set[str] = set()
        self._flusher: asyncio.Task[None] | None = None

    async def tenant(self, token: str | None) -> Principal:
        """The Principal of a valid tenant key; AuthenticationFailed otherwise."""
        if not token:
            raise AuthenticationFailed(MISSING_KEY)
        key = parse_key(token)
        if key is None or key.kind is not KeyKind.TENANT:
            raise AuthenticationFailed(INVALID_KEY)
        credential = await self.cache.get(key.public_id)
        if credential is None or not credential.accepts(key, self.hasher, self.clock()):
            # Maybe the key was made or rotated on another replica since we read it: look
            # again, at most once per REREAD_SECONDS per key, so wrong keys cannot flood the store.
            credential = await self.cache.reread(key.public_id, REREAD_SECONDS)
            if credential is None or not credential.accepts(key, self.hasher, self.clock()):
                raise AuthenticationFailed(INVALID_KEY)
        self._used.add(key.public_id)
        return credential.principal

    async def admin(self, token: str | None) -> AdminKey:
        """The admin key; 401 for no valid key, 403 for a valid tenant key."""
        if not token:
            raise AuthenticationFailed(MISSING_KEY)
        key = parse_key(token)
        if key is not None and key.kind is KeyKind.TENANT:
            await self.tenant(token)  # a wrong tenant key is a 401 like any wrong key
            raise PermissionDenied(ADMIN_ONLY)
        if key is None:
            raise AuthenticationFailed(INVALID_KEY)
        admin = await self.admin_cache.get(key.public_id)
        if not self._admin_accepts(key, admin):
            admin = await self.admin_cache.reread(key.public_id, REREAD_SECONDS)
            if not self._admin_accepts(key, admin):
                raise AuthenticationFailed(INVALID_KEY)
        assert admin is not None
        return admin

    def _admin_accepts(self, key: PresentedKey, admin: AdminKey | None) -> bool:
        # Hashed whether or not the id exists: the time taken says nothing about which ids do.
        matches = self.hasher.matches(key, admin.secret_hash if admin else _NO_HASH)
        return admin is not None and admin.revoked_at is None and matches

    def forget(self, key_id: str | None = None) -> None:
        """Drop cached credentials after a local change (other replicas wait out the TTL)."""
        self.cache.invalidate(key_id)
        self.admin_cache.invalidate(key_id)

    async def start(self) -> None:
        self._flusher = asyncio.create_task(self._flush_forever())

    async def stop(self) -> None:
        if self._flusher is not None:
            self._flusher.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._flusher
            self._flusher = None
        await self.flush_last_used()

    async def flush_last_used(self) -> None:
        """Write last-used times of the keys used since the previous flush, in one statement."""
        used, self._used = self._used, set()
        try:
            await self.store.touch_keys(used, self.clock())
        except Exception:
            logger.warning("could not record key use; will retry", exc_info=True)
            self._used |= used

    async def _flush_forever(self) -> None:
        while True:
            await asyncio.sleep(self.config.last_used_flush_seconds)
            await self.flush_last_used()

    def _cache(
        self, load: Callable[[str], Awaitable[V | None]], monotonic: Reading
    ) -> CredentialCache[V]:
        c = self.config
        return CredentialCache(
            load,
            c.cache_seconds,
            c.cache_max_entries,
            monotonic,
            max_unknown=c.unknown_cache_max_entries,
            unknown_rate=c.unknown_key_lookups_per_second,
            unknown_burst=c.unknown_key_lookups_per_second * 5,
        )

    async def _load_admin(self, key_id: str) -> AdminKey | None:
        try:
            return await self.store.admin_key(key_id)
        except (SQLAlchemyError, OSError) as err:
            logger.error("key store lookup failed: %s", type(err).__name__)
            raise KeyStoreUnavailable("The key store is unavailable; try again shortly.") from None

    async def _load(self, key_id: str) -> Credential | None:
        try:
            found = await self.store.credential(key_id)
        except (SQLAlchemyError, OSError) as err:
            logger.error("key store lookup failed: %s", type(err).__name__)
            raise KeyStoreUnavailable("The key store is unavailable; try again shortly.") from None
        return None if found is None else credential_for(*found)
