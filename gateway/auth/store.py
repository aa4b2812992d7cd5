"""The key store: tenants, tenant keys and admin keys in the shared :class:`Database`.

Rows in, records out; no secrets pass through here, only their hashes. The cache and the
admin operations sit on top (``cache.py``, ``manage.py``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import orjson
from sqlalchemy import Row, Update, and_, insert, select, update
from sqlalchemy.exc import IntegrityError

from gateway.auth.models import AdminKey, ApiKey, Limits, Tenant
from gateway.auth.schema import admin_keys, api_keys, tenants
from gateway.database import Database


class RecordExists(Exception):
    """A tenant or key with that id is already stored."""


class AuthStore:
    def __init__(self, database: Database) -> None:
        self.db = database

    async def _changed_one(self, statement: Update) -> bool:
        """Run an update of one record by its id; False when no such record."""
        async with self.db.transaction() as conn:
            return (await conn.execute(statement)).rowcount == 1

    # Tenants

    async def add_tenant(self, tenant: Tenant) -> None:
        values = {
            "id": tenant.id,
            "name": tenant.name,
            "allowed_models": _models_json(tenant.allowed_models),
            "limits": _limits_json(tenant.limits),
            "labels": orjson.dumps(dict(tenant.labels)).decode(),
            "enabled": tenant.enabled,
            "created_at": tenant.created_at,
            "updated_at": tenant.updated_at,
        }
        await self._insert(tenants, values, f"tenant {tenant.id!r} already exists")

    async def tenant(self, tenant_id: str) -> Tenant | None:
        async with self.db.read() as conn:
            row = (await conn.execute(select(tenants).where(tenants.c.id == tenant_id))).first()
        return None if row is None else _tenant(row)

    async def tenants(self) -> list[Tenant]:
        async with self.db.read() as conn:
            rows = await conn.execute(select(tenants).order_by(tenants.c.id))
            return [_tenant(r) for r in rows]

    async def set_tenant_enabled(self, tenant_id: str, enabled: bool, now: float) -> bool:
        """False when no such tenant."""
        statement = (
            update(tenants).where(tenants.c.id == tenant_id).values(enabled=enabled, updated_at=now)
        )
        return await self._changed_one(statement)

    async def set_tenant_limits(self, tenant_id: str, limits: Limits, now: float) -> bool:
        """Replace the tenant's limits; False when no such tenant."""
        statement = (
            update(tenants)
            .where(tenants.c.id == tenant_id)
            .values(limits=_limits_json(limits), updated_at=now)
        )
        return await self._changed_one(statement)

    # Tenant keys

    async def add_key(self, key: ApiKey) -> None:
        values = {
            "id": key.id,
            "tenant_id": key.tenant_id,
            "name": key.name,
            "secret_hash": key.secret_hash,
            "allowed_models": _models_json(key.allowed_models),
            "limits": _limits_json(key.limits),
            "expires_at": key.expires_at,
            "revoked_at": key.revoked_at,
            "created_at": key.created_at,
            "last_used_at": key.last_used_at,
        }
        await self._insert(api_keys, values, f"key {key.id!r} already exists")

    async def key(self, key_id: str) -> ApiKey | None:
        async with self.db.read() as conn:
            row = (await conn.execute(select(api_keys).where(api_keys.c.id == key_id))).first()
        return None if row is None else _api_key(row)

    async def keys(self, tenant_id: str | None = None) -> list[ApiKey]:
        query = select(api_keys).order_by(api_keys.c.tenant_id, api_keys.c.created_at)
        if tenant_id is not None:
            query = query.where(api_keys.c.tenant_id == tenant_id)
        async with self.db.read() as conn:
            return [_api_key(r) for r in await conn.execute(query)]

    async def credential(self, key_id: str) -> tuple[ApiKey, Tenant] | None:
        """A key with its tenant, in one query: what authentication needs."""
        query = select(api_keys, tenants).join(tenants, api_keys.c.tenant_id == tenants.c.id)
        async with self.db.read() as conn:
            row = (await conn.execute(query.where(api_keys.c.id == key_id))).first()
        if row is None:
            return None
        mapping = row._mapping
        key = _api_key(_columns(mapping, api_keys.c))
        return key, _tenant(_columns(mapping, tenants.c))

    async def revoke_key(self, key_id: str, now: float) -> bool:
        """False when no such key or already revoked."""
        statement = (
            update(api_keys)
            .where(and_(api_keys.c.id == key_id, api_keys.c.revoked_at.is_(None)))
            .values(revoked_at=now, previous_secret_hash=None, previous_secret_expires_at=None)
        )
        return await self._changed_one(statement)

    async def update_key(self, key_id: str, limits: Limits, expires_at: float | None) -> bool:
        """Replace the key's limits and expiry; False when no such key."""
        statement = (
            update(api_keys)
            .where(api_keys.c.id == key_id)
            .values(limits=_limits_json(limits), expires_at=expires_at)
        )
        return await self._changed_one(statement)

    async def rotate_key(
        self, key_id: str, new_hash: str, previous_hash: str | None, previous_until: float | None
    ) -> bool:
        """Store a new secret hash; the old one stays valid until ``previous_until``."""
        statement = (
            update(api_keys)
            .where(and_(api_keys.c.id == key_id, api_keys.c.revoked_at.is_(None)))
            .values(
                secret_hash=new_hash,
                previous_secret_hash=previous_hash,
                previous_secret_expires_at=previous_until,
            )
        )
        return await self._changed_one(statement)

    async def touch_keys(self, key_ids: Iterable[str], now: float) -> None:
        """Record use: written in batches by the authenticator, never per request."""
        ids = list(key_ids)
        if not ids:
            return
        statement = update(api_keys).where(api_keys.c.id.in_(ids)).values(last_used_at=now)
        async with self.db.transaction() as conn:
            await conn.execute(statement)

    # Admin keys

    async def add_admin_key(self, key: AdminKey) -> None:
        values = {
            "id": key.id,
            "name": key.name,
            "secret_hash": key.secret_hash,
            "revoked_at": key.revoked_at,
            "created_at": key.created_at,
            "last_used_at": key.last_used_at,
        }
        await self._insert(admin_keys, values, f"admin key {key.id!r} already exists")

    async def admin_key(self, key_id: str) -> AdminKey | None:
        async with self.db.read() as conn:
            row = (await conn.execute(select(admin_keys).where(admin_keys.c.id == key_id))).first()
        return None if row is None else AdminKey(**row._mapping)

    async def admin_keys(self) -> list[AdminKey]:
        async with self.db.read() as conn:
            rows = await conn.execute(select(admin_keys).order_by(admin_keys.c.created_at))
            return [AdminKey(**r._mapping) for r in rows]

    async def revoke_admin_key(self, key_id: str, now: float) -> bool:
        statement = (
            update(admin_keys)
            .where(and_(admin_keys.c.id == key_id, admin_keys.c.revoked_at.is_(None)))
            .values(revoked_at=now)
        )
        return await self._changed_one(statement)

    async def _insert(self, table: Any, values: dict[str, Any], conflict: str) -> None:
        try:
            async with self.db.transaction() as conn:
                await conn.execute(insert(table).values(values))
        except IntegrityError:
            raise RecordExists(conflict) from None


def _columns(mapping: Mapping[Any, Any], columns: Iterable[Any]) -> dict[str, Any]:
    return {c.name: mapping[c] for c in columns}


def _tenant(row: Row[Any] | Mapping[str, Any]) -> Tenant:
    m = row._mapping if isinstance(row, Row) else row
    return Tenant(
        id=m["id"],
        name=m["name"],
        allowed_models=_models(m["allowed_models"]),
        limits=Limits.model_validate_json(m["limits"]),
        labels=orjson.loads(m["labels"]),
        enabled=bool(m["enabled"]),
        created_at=m["created_at"],
        updated_at=m["updated_at"],
    )


def _api_key(row: Row[Any] | Mapping[str, Any]) -> ApiKey:
    m = row._mapping if isinstance(row, Row) else row
    return ApiKey(
        id=m["id"],
        tenant_id=m["tenant_id"],
        name=m["name"],
        secret_hash=m["secret_hash"],
        allowed_models=_models(m["allowed_models"]),
        limits=Limits.model_validate_json(m["limits"]),
        expires_at=m["expires_at"],
        revoked_at=m["revoked_at"],
        created_at=m["created_at"],
        last_used_at=m["last_used_at"],
        previous_secret_hash=m["previous_secret_hash"],
        previous_secret_expires_at=m["previous_secret_expires_at"],
    )


def _models_json(models: frozenset[str] | None) -> str | None:
    return None if models is None else orjson.dumps(sorted(models)).decode()


def _models(text: str | None) -> frozenset[str] | None:
    return None if text is None else frozenset(orjson.loads(text))


def _limits_json(limits: Limits) -> str:
    return limits.model_dump_json(exclude_none=True)
