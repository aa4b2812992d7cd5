"""Operations on tenants and keys, shared by the admin API and the CLI.

Secrets are made here and returned once, in :class:`IssuedKey`; only their hashes are stored.

    manager = KeyManager(AuthStore(db), KeyHasher(secret))
    await manager.create_tenant(TenantSpec(id="acme", allowed_models=["chat"]))
    issued = await manager.create_key("acme", KeySpec(name="ci"))
    print(issued.token)  # sk-pdg-<public id>-<secret>, never shown again
"""

from __future__ import annotations

import time
from typing import Any

from pydantic import Field, model_validator

from configkit import StrictModel
from gateway.auth.keys import KeyHasher, KeyKind, PresentedKey, new_key, new_secret
from gateway.auth.models import AdminKey, ApiKey, Limits, Tenant
from gateway.auth.store import AuthStore
from gateway.clock import Reading
from gateway.values import value

TENANT_ID_PATTERN = r"^[a-z0-9][a-z0-9_.-]{0,62}$"
MAX_GRACE_SECONDS = 30 * 24 * 3600


class UnknownRecord(LookupError):
    """No tenant or key with that id."""


class InvalidSpec(ValueError):
    """A request the store could hold but that makes no sense (a key wider than its tenant)."""


class _Spec(StrictModel):
    """What an admin asks the store to hold (strict and frozen like the config)."""


class TenantSpec(_Spec):
    id: str = Field(pattern=TENANT_ID_PATTERN)
    name: str | None = Field(None, min_length=1, max_length=200)
    allowed_models: list[str] | None = None
    """None: every model."""
    limits: Limits = Limits()
    labels: dict[str, str] = Field(default_factory=dict)
    enabled: bool = True


class KeySpec(_Spec):
    name: str = Field(min_length=1, max_length=200)
    allowed_models: list[str] | None = None
    """None: all of the tenant's models; otherwise a subset of them."""
    limits: Limits = Limits()
    expires_at: float | None = Field(None, gt=0)
    expires_in_seconds: float | None = Field(None, gt=0)

    @model_validator(mode="after")
    def _one_expiry(self) -> KeySpec:
        if self.expires_at is not None and self.expires_in_seconds is not None:
            raise ValueError("give expires_at or expires_in_seconds, not both")
        return self


class TenantUpdate(_Spec):
    limits: Limits
    """Replaces the tenant's limits: a limit left out is lifted."""


class KeyUpdate(_Spec):
    """What an admin may change on a key: ``limits`` replaces the key's own (a limit left out
    falls back to the tenant's); ``expires_at`` sets a new expiry, ``clear_expiry`` removes it;
    what is not given stays."""

    limits: Limits | None = None
    expires_at: float | None = Field(None, gt=0)
    clear_expiry: bool = False

    @model_validator(mode="after")
    def _one_expiry(self) -> KeyUpdate:
        if self.clear_expiry and self.expires_at is not None:
            raise ValueError("give expires_at or clear_expiry, not both")
        return self


class RotateSpec(_Spec):
    grace_seconds: float = Field(0, ge=0, le=MAX_GRACE_SECONDS)
    """How long the old secret keeps working next to the new one."""


@value
class IssuedKey:
    """A key just made: ``token`` is the only copy of its secret."""

    key: ApiKey | AdminKey
    token: str

    def public(self) -> dict[str, Any]:
        return {**self.key.public(), "key": self.token}

    def __repr__(self) -> str:
        return f"IssuedKey({self.key.id})"


class KeyManager:
    def __init__(self, store: AuthStore, hasher: KeyHasher, clock: Reading = time.time) -> None:
        self.store = store
        self.hasher = hasher
        self.clock = clock

    async def create_tenant(self, spec: TenantSpec) -> Tenant:
        now = self.clock()
        models = None if spec.allowed_models is None else frozenset(spec.allowed_models)
        tenant = Tenant(
            spec.id, spec.name or spec.id, models, spec.limits, spec.labels, spec.enabled, now, now
        )
        await self.store.add_tenant(tenant)
        return tenant

    async def tenant(self, tenant_id: str) -> Tenant:
        tenant = await self.store.tenant(tenant_id)
        if tenant is None:
            raise UnknownRecord(f"no tenant {tenant_id!r}")
        return tenant

    async def set_tenant_enabled(self, tenant_id: str, enabled: bool) -> Tenant:
        if not await self.store.set_tenant_enabled(tenant_id, enabled, self.clock()):
            raise UnknownRecord(f"no tenant {tenant_id!r}")
        return await self.tenant(tenant_id)

    async def set_tenant_limits(self, tenant_id: str, update: TenantUpdate) -> Tenant:
        if not await self.store.set_tenant_limits(tenant_id, update.limits, self.clock()):
            raise UnknownRecord(f"no tenant {tenant_id!r}")
        return await self.tenant(tenant_id)

    async def update_key(self, key_id: str, update: KeyUpdate) -> ApiKey:
        """New limits and/or expiry; what the update leaves out stays as it was."""
        key = await self.key(key_id)
        expires_at = key.expires_at
        if update.clear_expiry:
            expires_at = None
        elif update.expires_at is not None:
            if update.expires_at <= self.clock():
                raise InvalidSpec("expires_at is in the past (revoke the key instead)")
            expires_at = update.expires_at
        limits = key.limits if update.limits is None else update.limits
        await self.store.update_key(key_id, limits, expires_at)
        return await self.key(key_id)

    async def create_key(self, tenant_id: str, spec: KeySpec) -> IssuedKey:
        tenant = await self.tenant(tenant_id)
        models = None if spec.allowed_models is None else frozenset(spec.allowed_models)
        if models is not None and tenant.allowed_models is not None:
            outside = models - tenant.allowed_models
            if outside:
                raise InvalidSpec(f"models not allowed to tenant {tenant_id!r}: {sorted(outside)}")
        now = self.clock()
        expires_at = spec.expires_at
        if spec.expires_in_seconds is not None:
            expires_at = now + spec.expires_in_seconds
        if expires_at is not None and expires_at <= now:
            raise InvalidSpec("expires_at is in the past")
        presented = new_key(KeyKind.TENANT)
        key = ApiKey(
            id=presented.public_id,
            tenant_id=tenant_id,
            name=spec.name,
            secret_hash=self._hash(presented),
            allowed_models=models,
            limits=spec.limits,
            expires_at=expires_at,
            revoked_at=None,
            created_at=now,
            last_used_at=None,
        )
        await self.store.add_key(key)
        return IssuedKey(key, presented.token)

    async def key(self, key_id: str) -> ApiKey:
        key = await self.store.key(key_id)
        if key is None:
            raise UnknownRecord(f"no key {key_id!r}")
        return key

    async def revoke_key(self, key_id: str) -> ApiKey:
        """Revoking a revoked key is not an error: the outcome is the same."""
        await self.key(key_id)
        await self.store.revoke_key(key_id, self.clock())
        return await self.key(key_id)

    async def rotate_key(self, key_id: str, spec: RotateSpec) -> IssuedKey:
        """A new secret under the same public id (limits and usage carry on)."""
        old = await self.key(key_id)
        if old.revoked_at is not None:
            raise InvalidSpec(f"key {key_id!r} is revoked")
        presented = PresentedKey(KeyKind.TENANT, key_id, new_secret())
        keep_old = spec.grace_seconds > 0
        rotated = await self.store.rotate_key(
            key_id,
            self._hash(presented),
            old.secret_hash if keep_old else None,
            self.clock() + spec.grace_seconds if keep_old else None,
        )
        if not rotated:
            raise InvalidSpec(f"key {key_id!r} is revoked")
        return IssuedKey(await self.key(key_id), presented.token)

    async def create_admin_key(self, name: str) -> IssuedKey:
        presented = new_key(KeyKind.ADMIN)
        key = AdminKey(presented.public_id, name, self._hash(presented), None, self.clock(), None)
        await self.store.add_admin_key(key)
        return IssuedKey(key, presented.token)

    async def revoke_admin_key(self, key_id: str) -> AdminKey:
        if await self.store.admin_key(key_id) is None:
            raise UnknownRecord(f"no admin key {key_id!r}")
        await self.store.revoke_admin_key(key_id, self.clock())
        key = await self.store.admin_key(key_id)
        assert key is not None
        return key

    def _hash(self, key: PresentedKey) -> str:
        return self.hasher.hash(key.public_id, key.secret)
