"""Tenants and keys in the store, through KeyManager: the same suite on SQLite and PostgreSQL."""

from __future__ import annotations

import pytest
from sqlalchemy import text

from gateway.auth.keys import KeyHasher, parse_key
from gateway.auth.manage import (
    InvalidSpec,
    KeyManager,
    KeySpec,
    RotateSpec,
    TenantSpec,
    UnknownRecord,
)
from gateway.auth.models import Limits
from gateway.auth.store import AuthStore, RecordExists
from gateway.database import Database

HASHER = KeyHasher(b"unit-test-hash-secret")


class Clock:
    def __init__(self) -> None:
        self.now = 1_700_000_000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def manager(migrated: Database, clock: Clock) -> KeyManager:
    return KeyManager(AuthStore(migrated), HASHER, clock)


async def test_tenants_round_trip(manager: KeyManager) -> None:
    spec = TenantSpec(
        id="acme",
        name="Acme Corp",
        allowed_models=["chat", "embed"],
        limits=Limits(requests_per_minute=60),
        labels={"team": "search"},
    )
    created = await manager.create_tenant(spec)
    await manager.create_tenant(TenantSpec(id="beta"))
    assert await manager.tenant("acme") == created
    assert created.allowed_models == frozenset({"chat", "embed"})
    assert [t.id for t in await manager.store.tenants()] == ["acme", "beta"]
    assert (await manager.tenant("beta")).allowed_models is None
    with pytest.raises(RecordExists):
        await manager.create_tenant(TenantSpec(id="acme"))
    with pytest.raises(UnknownRecord):
        await manager.tenant("nobody")


async def test_a_created_key_is_stored_only_as_a_hash(
    manager: KeyManager, migrated: Database
) -> None:
    await manager.create_tenant(TenantSpec(id="acme"))
    issued = await manager.create_key("acme", KeySpec(name="ci", allowed_models=["chat"]))
    presented = parse_key(issued.token)
    assert presented is not None and presented.public_id == issued.key.id
    async with migrated.transaction() as conn:
        dump = repr([tuple(r) for r in await conn.execute(text("SELECT * FROM api_keys"))])
    assert presented.secret not in dump
    assert "key" not in issued.key.public()
    assert presented.secret not in repr(issued)
    found = await manager.store.credential(issued.key.id)
    assert found is not None
    key, tenant = found
    assert (key.name, key.allowed_models, tenant.id) == ("ci", frozenset({"chat"}), "acme")
    assert HASHER.matches(presented, key.secret_hash)


async def test_a_key_cannot_be_wider_than_its_tenant(manager: KeyManager) -> None:
    await manager.create_tenant(TenantSpec(id="acme", allowed_models=["chat"]))
    with pytest.raises(InvalidSpec, match="embed"):
        await manager.create_key("acme", KeySpec(name="k", allowed_models=["chat", "embed"]))
    with pytest.raises(UnknownRecord):
        await manager.create_key("nobody", KeySpec(name="k"))


async def test_listing_keys_per_tenant(manager: KeyManager) -> None:
    for tenant in ("a", "b"):
        await manager.create_tenant(TenantSpec(id=tenant))
    await manager.create_key("a", KeySpec(name="a1"))
    await manager.create_key("a", KeySpec(name="a2"))
    await manager.create_key("b", KeySpec(name="b1"))
    assert [k.name for k in await manager.store.keys("a")] == ["a1", "a2"]
    assert len(await manager.store.keys()) == 3


async def test_revoke_and_disable(manager: KeyManager, clock: Clock) -> None:
    await manager.create_tenant(TenantSpec(id="acme"))
    issued = await manager.create_key("acme", KeySpec(name="ci"))
    revoked = await manager.revoke_key(issued.key.id)
    assert revoked.revoked_at == clock.now
    assert (await manager.revoke_key(issued.key.id)).revoked_at == clock.now
    disabled = await manager.set_tenant_enabled("acme", False)
    assert not disabled.enabled
    assert (await manager.set_tenant_enabled("acme", True)).enabled
    with pytest.raises(UnknownRecord):
        await manager.revoke_key("nosuchkey123")


async def test_rotation_keeps_the_id_and_the_old_secret_for_the_grace_period(
    manager: KeyManager, clock: Clock
) -> None:
    await manager.create_tenant(TenantSpec(id="acme"))
    first = await manager.create_key("acme", KeySpec(name="ci"))
    second = await manager.rotate_key(first.key.id, RotateSpec(grace_seconds=60))
    assert second.key.id == first.key.id and second.token != first.token
    key = await manager.key(first.key.id)
    old, new = parse_key(first.token), parse_key(second.token)
    assert old is not None and new is not None
    assert HASHER.matches(new, key.secret_hash)
    assert key.previous_secret_hash is not None
    assert HASHER.matches(old, key.previous_secret_hash)
    assert key.previous_secret_expires_at == clock.now + 60
    third = await manager.rotate_key(first.key.id, RotateSpec())
    key = await manager.key(first.key.id)
    assert key.previous_secret_hash is None
    assert parse_key(third.token) is not None
    await manager.revoke_key(first.key.id)
    with pytest.raises(InvalidSpec, match="revoked"):
        await manager.rotate_key(first.key.id, RotateSpec())


async def test_expiry_in_the_past_is_refused(manager: KeyManager, clock: Clock) -> None:
    await manager.create_tenant(TenantSpec(id="acme"))
    with pytest.raises(InvalidSpec, match="past"):
        await manager.create_key("acme", KeySpec(name="k", expires_at=clock.now - 1))
    issued = await manager.create_key("acme", KeySpec(name="k", expires_in_seconds=30))
    assert issued.key.public()["expires_at"] == clock.now + 30


async def test_last_used_times_are_written_in_one_batch(manager: KeyManager, clock: Clock) -> None:
    await manager.create_tenant(TenantSpec(id="acme"))
    keys = [await manager.create_key("acme", KeySpec(name=f"k{i}")) for i in range(3)]
    await manager.store.touch_keys([keys[0].key.id, keys[2].key.id], clock.now + 5)
    used = {k.name: k.last_used_at for k in await manager.store.keys("acme")}
    assert used == {"k0": clock.now + 5, "k1": None, "k2": clock.now + 5}


async def test_admin_keys(manager: KeyManager) -> None:
    issued = await manager.create_admin_key("ops")
    assert issued.token.startswith("sk-pdgadmin-")
    assert [k.name for k in await manager.store.admin_keys()] == ["ops"]
    revoked = await manager.revoke_admin_key(issued.key.id)
    assert revoked.revoked_at is not None
    with pytest.raises(UnknownRecord):
        await manager.revoke_admin_key("nosuchkey123")
