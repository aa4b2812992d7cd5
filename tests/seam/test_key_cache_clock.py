"""Keys across two replicas sharing one store, on one clock that the test moves: a change made
through one replica reaches the other within the cache bound, and not before the bound says.

Two apps built by the factory on one SQLite file stand in for two gateway replicas; the real
two-process case on PostgreSQL is tests/integration/auth/test_replicas_on_postgres.py.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import orjson

from gateway.clock import ManualClock
from tests.seam.harness import Gateway, running_gateway
from tests.seam.test_exit_paths import CHAT, chat
from tests.seam.upstream import Script

BOUND = 5.0
AUTH = {"enabled": True, "hash_secret": "seam-test-hash-secret-0123456789", "cache_seconds": BOUND}
SCRIPTS = {"default": Script()}


def bearer(token: str) -> tuple[tuple[bytes, bytes], ...]:
    return ((b"authorization", f"Bearer {token}".encode()),)


class Admin:
    def __init__(self, gateway: Gateway, token: str) -> None:
        self.gateway, self.headers = gateway, bearer(token)

    async def post(self, path: str, body: dict[str, Any] | None = None) -> dict[str, Any]:
        reply = await self.gateway.call(
            "/admin" + path, orjson.dumps(body or {}), headers=self.headers
        )
        assert reply.status in (200, 201), reply.body
        data: dict[str, Any] = reply.json()
        return data


@asynccontextmanager
async def two_replicas(
    tmp_path: Path,
) -> AsyncIterator[tuple[Gateway, Gateway, Admin, ManualClock]]:
    clock = ManualClock()
    async with (
        running_gateway(tmp_path, SCRIPTS, clock, auth=AUTH) as first,
        running_gateway(tmp_path, SCRIPTS, clock, auth=AUTH) as second,
    ):
        assert first.state.auth is not None
        issued = await first.state.auth.manager.create_admin_key("tests")
        yield first, second, Admin(first, issued.token), clock


async def status(gateway: Gateway, token: str) -> int:
    return (await gateway.call(CHAT, chat(), headers=bearer(token))).status


async def test_a_revoked_key_is_refused_by_the_other_replica_once_the_bound_has_passed(
    tmp_path: Path,
) -> None:
    async with two_replicas(tmp_path) as (first, second, admin, clock):
        await admin.post("/tenants", {"id": "acme"})
        issued = await admin.post("/tenants/acme/keys", {"name": "shared"})
        key = issued["key"]
        assert await status(first, key) == 200 and await status(second, key) == 200  # cached

        await admin.post(f"/keys/{issued['id']}/revoke")
        assert await status(first, key) == 401  # the replica that revoked: at once
        clock.advance(BOUND - 0.5)
        assert await status(second, key) == 200  # its cached entry still serves, as promised
        clock.advance(1.0)
        assert await status(second, key) == 401  # past the bound: read again, refused


async def test_a_disabled_tenant_is_refused_by_the_other_replica_within_the_bound(
    tmp_path: Path,
) -> None:
    async with two_replicas(tmp_path) as (first, second, admin, clock):
        await admin.post("/tenants", {"id": "gone"})
        key = (await admin.post("/tenants/gone/keys", {"name": "k"}))["key"]
        assert await status(second, key) == 200
        await admin.post("/tenants/gone/disable")
        assert await status(first, key) == 401
        clock.advance(BOUND + 0.5)
        assert await status(second, key) == 401


async def test_a_key_rotated_through_one_works_on_the_other_after_the_reread_allowance(
    tmp_path: Path,
) -> None:
    async with two_replicas(tmp_path) as (first, second, admin, clock):
        await admin.post("/tenants", {"id": "rot"})
        issued = await admin.post("/tenants/rot/keys", {"name": "k"})
        assert await status(second, issued["key"]) == 200  # second caches the old hash
        clock.advance(1.0)  # an entry at least a second old is read again on a mismatch
        rotated = await admin.post(f"/keys/{issued['id']}/rotate")
        assert await status(second, rotated["key"]) == 200
        assert await status(first, rotated["key"]) == 200


async def test_a_key_expires_on_the_clock_even_inside_the_cache_bound(tmp_path: Path) -> None:
    async with two_replicas(tmp_path) as (first, second, admin, clock):
        await admin.post("/tenants", {"id": "brief"})
        issued = await admin.post("/tenants/brief/keys", {"name": "k", "expires_in_seconds": 2})
        key = issued["key"]
        assert await status(first, key) == 200 and await status(second, key) == 200  # cached
        clock.advance(1.9)
        assert await status(first, key) == 200 and await status(second, key) == 200
        clock.advance(0.2)  # past the expiry, well inside the cache's bound of BOUND seconds
        assert await status(first, key) == 401 and await status(second, key) == 401
