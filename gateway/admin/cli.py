"""``pd-gateway tenants|keys|admin-keys|db ...``: manage the key store directly, no server needed.

This is how the first admin key (and, on one machine, the first tenant key) is made::

    pd-gateway tenants create demo --if-missing
    pd-gateway keys create --tenant demo --name local --print-secret-only   # prints only the key

Every command takes ``--config`` (default ``$PD_GATEWAY_CONFIG``; without one, the embedded
defaults: SQLite under ./data) and ``--database-url``; the schema is brought up to date first.
Output is JSON on stdout; errors go to stderr with exit status 1.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from collections.abc import Awaitable, Callable
from typing import Any

import orjson
from pydantic import ValidationError

from gateway.admin.budget_cli import budget_figures, parse_budget
from gateway.auth.config import AuthConfig, HashSecretError
from gateway.auth.manage import (
    InvalidSpec,
    IssuedKey,
    KeyManager,
    KeySpec,
    RotateSpec,
    TenantSpec,
    UnknownRecord,
)
from gateway.auth.models import Limits
from gateway.auth.service import AuthService
from gateway.auth.store import RecordExists
from gateway.config import ConfigError, GatewayConfig, format_validation_error, load_config
from gateway.database import Database, MigrationError, StorageConfig
from gateway.runtime.migrations import all_migrations
from gateway.values import value


class Store:
    """The open store, and the key manager on it (built on first use: ``db`` needs no secret);
    ``config``: the file ``--config`` named, if any (the prices commands check models by it)."""

    def __init__(
        self,
        database: Database,
        storage: StorageConfig,
        auth: AuthConfig,
        config: GatewayConfig | None = None,
    ) -> None:
        self.db = database
        self.config = config
        self._storage, self._auth = storage, auth
        self._manager: KeyManager | None = None

    @property
    def manager(self) -> KeyManager:
        if self._manager is None:
            self._manager = AuthService.build(self._auth, self._storage, self.db).manager
        return self._manager


Operation = Callable[[argparse.Namespace, Store], Awaitable[Any]]


def add_commands(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    _tenant_commands(commands.add_parser("tenants", help="create, list, disable tenants"))
    _key_commands(commands.add_parser("keys", help="create, list, revoke, rotate tenant keys"))
    _admin_key_commands(commands.add_parser("admin-keys", help="keys for the /admin/ API"))
    _db_commands(commands.add_parser("db", help="schema migrations of the store"))
    from gateway.admin.prices_cli import price_commands  # imports this module's helpers

    price_commands(commands.add_parser("prices", help="show, set, clear prices in the store"))


def _tenant_commands(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="action", required=True)
    create = _command(sub, "create", _create_tenant, "add a tenant")
    create.add_argument("tenant_id")
    create.add_argument("--name")
    create.add_argument("--models", help="comma-separated; default: every model")
    create.add_argument("--label", action="append", default=[], metavar="KEY=VALUE")
    create.add_argument("--if-missing", action="store_true", help="an existing one is fine")
    _limit_options(create)
    _command(sub, "list", _list_tenants, "every tenant")
    _command(sub, "budget", _tenant_budget, "a tenant's budget and what it spent").add_argument(
        "tenant_id"
    )
    for action, operation in (("show", _show_tenant), ("disable", _disable), ("enable", _enable)):
        _command(sub, action, operation, f"{action} a tenant").add_argument("tenant_id")


def _key_commands(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="action", required=True)
    create = _command(sub, "create", _create_key, "issue a key (its secret is shown once)")
    create.add_argument("--tenant", required=True)
    create.add_argument("--name", required=True)
    create.add_argument("--models", help="comma-separated subset of the tenant's")
    create.add_argument("--expires-in", type=float, metavar="SECONDS")
    create.add_argument("--print-secret-only", action="store_true", help="print just the key")
    _limit_options(create)
    _command(sub, "list", _list_keys, "keys (never their secrets)").add_argument("--tenant")
    _command(sub, "budget", _key_budget, "a key's budget and what it spent").add_argument("key_id")
    _command(sub, "revoke", _revoke_key, "revoke a key").add_argument("key_id")
    rotate = _command(sub, "rotate", _rotate_key, "a new secret for a key")
    rotate.add_argument("key_id")
    rotate.add_argument("--grace-seconds", type=float, default=0.0, help="old secret stays valid")
    rotate.add_argument("--print-secret-only", action="store_true")


def _admin_key_commands(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="action", required=True)
    create = _command(sub, "create", _create_admin_key, "issue an admin key")
    create.add_argument("--name", required=True)
    create.add_argument("--print-secret-only", action="store_true")
    _command(sub, "list", _list_admin_keys, "admin keys")
    _command(sub, "revoke", _revoke_admin_key, "revoke an admin key").add_argument("key_id")


def _db_commands(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="action", required=True)
    _command(sub, "migrate", _migrated, "bring the schema up to date", migrate=False)
    _command(sub, "status", _status, "schema versions", migrate=False)


def _command(
    sub: argparse._SubParsersAction[argparse.ArgumentParser],
    name: str,
    operation: Operation,
    help: str,
    *,
    migrate: bool = True,
) -> argparse.ArgumentParser:
    parser: argparse.ArgumentParser = sub.add_parser(name, help=help)
    parser.add_argument("--config", default=os.environ.get("PD_GATEWAY_CONFIG"))
    parser.add_argument("--database-url", help="overrides storage.url")
    parser.set_defaults(handler=lambda args: _run(args, operation, migrate))
    return parser


def _limit_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--requests-per-minute", type=int)
    parser.add_argument("--tokens-per-minute", type=int)
    parser.add_argument("--concurrent-requests", type=int)
    parser.add_argument("--daily-tokens", type=int)
    parser.add_argument(
        "--budget",
        type=parse_budget,
        metavar="AMOUNT[:PERIOD[:MODE]]",
        help="money per day|month|none, hard|soft (default month, hard): 200:month:hard",
    )


def _run(args: argparse.Namespace, operation: Operation, migrate: bool) -> int:
    try:
        config, storage, auth = _settings(args)
        return asyncio.run(_with_store(args, Settings(config, storage, auth), operation, migrate))
    except ValidationError as err:
        return _fail(format_validation_error(err))
    except (ConfigError, HashSecretError, MigrationError, InvalidSpec, RecordExists) as err:
        return _fail(str(err))
    except UnknownRecord as err:
        return _fail(err.args[0])


@value
class Settings:
    config: GatewayConfig | None
    storage: StorageConfig
    auth: AuthConfig


async def _with_store(
    args: argparse.Namespace, settings: Settings, operation: Operation, migrate: bool
) -> int:
    database = Database.open(settings.storage)
    try:
        if migrate:
            await database.migrate(all_migrations())
        store = Store(database, settings.storage, settings.auth, settings.config)
        result = await operation(args, store)
    finally:
        await database.close()
    if isinstance(result, IssuedKey) and getattr(args, "print_secret_only", False):
        print(result.token)
    else:
        print(orjson.dumps(_public(result), option=orjson.OPT_INDENT_2).decode())
    return 0


def _settings(
    args: argparse.Namespace,
) -> tuple[GatewayConfig | None, StorageConfig, AuthConfig]:
    config = None
    if args.config:
        config = load_config(args.config)
        storage, auth = config.storage, config.auth
    else:
        storage, auth = StorageConfig(), AuthConfig()
    if args.database_url:
        storage = StorageConfig.model_validate({**storage.model_dump(), "url": args.database_url})
    return config, storage, auth


def _public(result: Any) -> Any:
    if isinstance(result, list):
        return {"object": "list", "data": [_public(r) for r in result]}
    return result.public() if hasattr(result, "public") else result


def _fail(message: str) -> int:
    print(f"pd-gateway: {message}", file=sys.stderr)
    return 1


def _limits(args: argparse.Namespace) -> Limits:
    return Limits(
        requests_per_minute=args.requests_per_minute,
        tokens_per_minute=args.tokens_per_minute,
        concurrent_requests=args.concurrent_requests,
        daily_tokens=args.daily_tokens,
        budget=args.budget,
    )


def _models(value: str | None) -> list[str] | None:
    return None if value is None else [m.strip() for m in value.split(",") if m.strip()]


async def _create_tenant(args: argparse.Namespace, store: Store) -> Any:
    labels = dict(label.split("=", 1) for label in args.label if "=" in label)
    spec = TenantSpec(
        id=args.tenant_id,
        name=args.name,
        allowed_models=_models(args.models),
        limits=_limits(args),
        labels=labels,
    )
    try:
        return await store.manager.create_tenant(spec)
    except RecordExists:
        if not args.if_missing:
            raise
        return await store.manager.tenant(args.tenant_id)


async def _list_tenants(args: argparse.Namespace, store: Store) -> Any:
    return await store.manager.store.tenants()


async def _show_tenant(args: argparse.Namespace, store: Store) -> Any:
    return await store.manager.tenant(args.tenant_id)


async def _disable(args: argparse.Namespace, store: Store) -> Any:
    return await store.manager.set_tenant_enabled(args.tenant_id, False)


async def _enable(args: argparse.Namespace, store: Store) -> Any:
    return await store.manager.set_tenant_enabled(args.tenant_id, True)


async def _create_key(args: argparse.Namespace, store: Store) -> Any:
    spec = KeySpec(
        name=args.name,
        allowed_models=_models(args.models),
        limits=_limits(args),
        expires_in_seconds=args.expires_in,
    )
    return await store.manager.create_key(args.tenant, spec)


async def _tenant_budget(args: argparse.Namespace, store: Store) -> Any:
    tenant = await store.manager.tenant(args.tenant_id)
    return await budget_figures(args, "tenant", tenant.id, tenant.limits)


async def _key_budget(args: argparse.Namespace, store: Store) -> Any:
    key = await store.manager.key(args.key_id)
    return await budget_figures(args, "key", key.id, key.limits)


async def _list_keys(args: argparse.Namespace, store: Store) -> Any:
    return await store.manager.store.keys(args.tenant)


async def _revoke_key(args: argparse.Namespace, store: Store) -> Any:
    return await store.manager.revoke_key(args.key_id)


async def _rotate_key(args: argparse.Namespace, store: Store) -> Any:
    return await store.manager.rotate_key(args.key_id, RotateSpec(grace_seconds=args.grace_seconds))


async def _create_admin_key(args: argparse.Namespace, store: Store) -> Any:
    return await store.manager.create_admin_key(args.name)


async def _list_admin_keys(args: argparse.Namespace, store: Store) -> Any:
    return await store.manager.store.admin_keys()


async def _revoke_admin_key(args: argparse.Namespace, store: Store) -> Any:
    return await store.manager.revoke_admin_key(args.key_id)


async def _migrated(args: argparse.Namespace, store: Store) -> Any:
    applied = await store.db.migrate(all_migrations())
    return {"applied": [f"{m.component} {m.version}: {m.description}" for m in applied]}


async def _status(args: argparse.Namespace, store: Store) -> Any:
    return {"schema_versions": await store.db.schema_versions()}
