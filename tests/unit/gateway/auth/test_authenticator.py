"""Authentication against a real store: who gets in, what they may use, how fast changes bite."""

from __future__ import annotations

from pathlib import Path

import pytest
from sqlalchemy.engine import make_url

from gateway.auth.authenticator import INVALID_KEY, MISSING_KEY, Authenticator
from gateway.auth.config import AuthConfig
from gateway.auth.keys import KeyHasher
from gateway.auth.manage import KeyManager, KeySpec, RotateSpec, TenantSpec
from gateway.auth.models import Limits
from gateway.auth.store import AuthStore
from gateway.database import Database
from gateway.errors import AuthenticationFailed, KeyStoreUnavailable, PermissionDenied

HASHER = KeyHasher(b"unit-test-hash-secret")


class Clock:
    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


class CountingStore(AuthStore):
    """The real store, counting credential reads."""

    reads = 0

    async def credential(self, key_id: str):  # type: ignore[no-untyped-def]
        self.reads += 1
        return await super().credential(key_id)


@pytest.fixture
def wall() -> Clock:
    return Clock(1_700_000_000.0)


@pytest.fixture
def mono() -> Clock:
    return Clock(50.0)


@pytest.fixture
def store(migrated: Database) -> CountingStore:
    return CountingStore(migrated)


@pytest.fixture
def auth(store: CountingStore, wall: Clock, mono: Clock) -> Authenticator:
    return Authenticator(store, HASHER, AuthConfig(cache_seconds=5), wall, mono)


@pytest.fixture
def manager(store: CountingStore, wall: Clock) -> KeyManager:
    return KeyManager(store, HASHER, wall)


async def _tenant_and_key(manager: KeyManager, **key: object) -> str:
    await manager.create_tenant(
        TenantSpec(
            id="acme",
            allowed_models=["chat", "embed"],
            limits=Limits(requests_per_minute=100, tokens_per_minute=1000),
        )
    )
    issued = await manager.create_key("acme", KeySpec.model_validate({"name": "ci", **key}))
    return issued.token


async def test_a_valid_key_gives_its_principal(auth: Authenticator, manager: KeyManager) -> None:
    token = await _tenant_and_key(
        manager, allowed_models=["chat"], limits={"requests_per_minute": 5}
    )
    principal = await auth.tenant(token)
    assert principal.tenant_id == "acme" and principal.key_name == "ci"
    assert principal.allowed_models == frozenset({"chat"})
    assert principal.may_use("chat") and not principal.may_use("embed")
    assert principal.limits == Limits(requests_per_minute=5, tokens_per_minute=1000)
    assert principal.tenant_limits == Limits(requests_per_minute=100, tokens_per_minute=1000)


async def test_warm_requests_do_not_reach_the_store(
    auth: Authenticator, manager: KeyManager, store: CountingStore
) -> None:
    token = await _tenant_and_key(manager)
    for _ in range(50):
        await auth.tenant(token)
    assert store.reads == 1


@pytest.mark.parametrize("token", [None, ""])
async def test_a_missing_key_says_so(auth: Authenticator, token: str | None) -> None:
    with pytest.raises(AuthenticationFailed) as caught:
        await auth.tenant(token)
    assert caught.value.message == MISSING_KEY
    assert caught.value.status == 401 and caught.value.code == "invalid_api_key"


async def test_every_bad_key_gets_the_same_answer(auth: Authenticator, manager: KeyManager) -> None:
    token = await _tenant_and_key(manager)
    admin = (await manager.create_admin_key("ops")).token
    bad = [
        "sk-not-a-key",
        token[:-1] + ("A" if token[-1] != "A" else "B"),  # wrong secret
        "sk-pdg-zzzzzzzzzzzz-" + token.rsplit("-", 1)[1],  # unknown id
        admin,  # admin keys are not tenant keys
    ]
    for candidate in bad:
        with pytest.raises(AuthenticationFailed) as caught:
            await auth.tenant(candidate)
        assert caught.value.message == INVALID_KEY
        assert candidate not in caught.value.message


async def test_expiry_is_checked_on_every_request(
    auth: Authenticator, manager: KeyManager, wall: Clock
) -> None:
    token = await _tenant_and_key(manager, expires_in_seconds=10)
    await auth.tenant(token)
    wall.now += 10
    with pytest.raises(AuthenticationFailed):
        await auth.tenant(token)


async def test_revocation_on_another_replica_bites_within_the_bound(
    auth: Authenticator, manager: KeyManager, mono: Clock
) -> None:
    token = await _tenant_and_key(manager)
    principal = await auth.tenant(token)
    await manager.revoke_key(principal.key_id)  # as another replica would: no local forget
    mono.now += 4.9
    await auth.tenant(token)  # still cached
    mono.now += 0.1
    with pytest.raises(AuthenticationFailed):
        await auth.tenant(token)


async def test_disabling_the_tenant_stops_its_keys(
    auth: Authenticator, manager: KeyManager
) -> None:
    token = await _tenant_and_key(manager)
    await auth.tenant(token)
    await manager.set_tenant_enabled("acme", False)
    auth.forget()
    with pytest.raises(AuthenticationFailed):
        await auth.tenant(token)


async def test_rotation_grace_period(auth: Authenticator, manager: KeyManager, wall: Clock) -> None:
    old = await _tenant_and_key(manager)
    key_id = (await auth.tenant(old)).key_id
    new = (await manager.rotate_key(key_id, RotateSpec(grace_seconds=30))).token
    auth.forget(key_id)
    assert (await auth.tenant(new)).key_id == key_id
    assert (await auth.tenant(old)).key_id == key_id
    wall.now += 30
    with pytest.raises(AuthenticationFailed):
        await auth.tenant(old)
    assert (await auth.tenant(new)).key_id == key_id


async def test_admin_routes_take_admin_keys_only(
    auth: Authenticator, manager: KeyManager, mono: Clock
) -> None:
    token = await _tenant_and_key(manager)
    admin = await manager.create_admin_key("ops")
    assert (await auth.admin(admin.token)).id == admin.key.id
    with pytest.raises(PermissionDenied):
        await auth.admin(token)
    with pytest.raises(AuthenticationFailed):
        await auth.admin(token[:-1] + ("A" if token[-1] != "A" else "B"))
    await manager.revoke_admin_key(admin.key.id)  # by the CLI: this replica learns within 5 s
    mono.now += 5
    with pytest.raises(AuthenticationFailed):
        await auth.admin(admin.token)


async def test_admin_keys_are_cached_like_tenant_keys(
    auth: Authenticator, manager: KeyManager, monkeypatch: pytest.MonkeyPatch
) -> None:
    admin = await manager.create_admin_key("ops")
    reads = 0
    real = auth.store.admin_key

    async def counting(key_id: str):  # type: ignore[no-untyped-def]
        nonlocal reads
        reads += 1
        return await real(key_id)

    monkeypatch.setattr(auth.store, "admin_key", counting)
    for _ in range(10):
        assert (await auth.admin(admin.token)).id == admin.key.id
    assert reads == 1


async def test_unknown_key_ids_spend_a_failure_budget_then_are_refused_unread(
    store: CountingStore, manager: KeyManager, wall: Clock, mono: Clock
) -> None:
    import asyncio

    token = await _tenant_and_key(manager)
    config = AuthConfig(cache_seconds=5, unknown_key_lookups_per_second=2)  # burst 10
    auth = Authenticator(store, HASHER, config, wall, mono)
    prefix = token.rsplit("-", 1)[0]
    public_id = prefix.rsplit("-", 1)[1]

    async def forged(i: int) -> None:  # well-formed ids nobody issued
        with pytest.raises(AuthenticationFailed):
            await auth.tenant(token.replace(public_id, f"{i:0{len(public_id)}d}"))

    await asyncio.gather(*(forged(i) for i in range(200)))
    assert store.reads < 200 - 100  # the budget's 10, then the slow lane's short queue
    assert auth.cache.refused > 100
    assert (await auth.tenant(token)).tenant_id == "acme"  # a real key still gets through


async def test_last_use_is_flushed_in_batches(
    auth: Authenticator, manager: KeyManager, wall: Clock
) -> None:
    token = await _tenant_and_key(manager)
    principal = await auth.tenant(token)
    assert (await manager.key(principal.key_id)).last_used_at is None
    await auth.flush_last_used()
    assert (await manager.key(principal.key_id)).last_used_at == wall.now


async def test_an_unreachable_store_refuses_instead_of_letting_through(
    auth: Authenticator, manager: KeyManager, migrated: Database
) -> None:
    token = await _tenant_and_key(manager)
    await migrated.close()
    broken = Database.open(migrated.config.model_copy(update={"url": _unreachable(migrated)}))
    auth.store.db = broken
    try:
        with pytest.raises(KeyStoreUnavailable):
            await auth.tenant(token)
    finally:
        await broken.close()


def _unreachable(db: Database) -> str:
    if db.backend == "sqlite":  # a file that is not a database
        database = make_url(db.config.url).database
        assert database is not None
        garbage = Path(database).with_name("garbage.db")
        garbage.write_bytes(b"this is not a database file" * 100)
        return f"sqlite:///{garbage}"
    return "postgresql://postgres@127.0.0.1:1/none"


async def test_a_key_rotated_on_another_replica_works_here_within_a_second(
    auth: Authenticator, manager: KeyManager, store: CountingStore, mono: Clock
) -> None:
    old = await _tenant_and_key(manager)
    key_id = (await auth.tenant(old)).key_id
    new = (await manager.rotate_key(key_id, RotateSpec())).token  # no local forget
    mono.now += 1.0
    assert (await auth.tenant(new)).key_id == key_id


async def test_wrong_secrets_reread_the_store_at_most_once_a_second(
    auth: Authenticator, manager: KeyManager, store: CountingStore, mono: Clock
) -> None:
    token = await _tenant_and_key(manager)
    await auth.tenant(token)
    wrong = token[:-1] + ("A" if token[-1] != "A" else "B")
    for _ in range(20):
        with pytest.raises(AuthenticationFailed):
            await auth.tenant(wrong)
    assert store.reads == 1  # the entry was younger than a second: no reread
    mono.now += 1.0
    for _ in range(20):
        with pytest.raises(AuthenticationFailed):
            await auth.tenant(wrong)
    assert store.reads == 2
