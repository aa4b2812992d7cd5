"""What one gateway app holds while it runs: built by the factory, started by the lifespan."""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

from gateway.accounting.stage import Accounting
from gateway.auth.service import AuthService, build_auth
from gateway.config import GatewayConfig, PoolConfig
from gateway.errors import ModelNotFound
from gateway.limits.admission import RateLimiter
from gateway.metrics import GatewayMetrics
from gateway.proxy.upstream import AiohttpUpstream, UpstreamClient
from gateway.routing.pools import Pool, ProbeFn, check_forever, check_once
from gateway.routing.router import ModelRouter
from gateway.routing.service import Routing
from gateway.routing.table import build_routers, build_routing
from gateway.storage import Database
from gateway.storage.registry import all_migrations
from gateway.telemetry import Tracing, TracingConfig, build_tracing

UpstreamFactory = Callable[[PoolConfig], UpstreamClient]


@dataclass(frozen=True, slots=True)
class ModelRoute:
    name: str
    pool: Pool
    """The model's first pool (its baseline variant's); ``router`` knows them all."""
    upstream_model: str | None
    owned_by: str
    router: ModelRouter


@dataclass(slots=True)
class GatewayState:
    config: GatewayConfig
    metrics: GatewayMetrics
    pools: dict[str, Pool]
    models: dict[str, ModelRoute]
    upstream_factory: UpstreamFactory
    routing: Routing
    accounting: Accounting
    database: Database
    auth: AuthService | None
    """None when ``auth.enabled`` is false: no keys asked, every model visible."""
    started_at: int = field(default_factory=lambda: int(time.time()))
    clients: dict[str, UpstreamClient] = field(default_factory=dict)
    _health_tasks: list[asyncio.Task[None]] = field(default_factory=list)
    tracing: Tracing = field(default_factory=lambda: build_tracing(TracingConfig(), {}))

    @classmethod
    def build(
        cls, config: GatewayConfig, upstream_factory: UpstreamFactory = AiohttpUpstream
    ) -> GatewayState:
        pools = {name: Pool(name, pool) for name, pool in config.pools.items()}
        metrics = GatewayMetrics()
        routing = build_routing(config, metrics)
        limiter = RateLimiter.build(config.limits, metrics)
        accounting = Accounting(config.accounting, limiter, metrics.registry)
        models = model_routes(config, pools, routing)
        tracing = build_tracing(config.tracing, os.environ)
        database = Database.open(config.storage)
        auth = build_auth(config.auth, config.storage, database)
        return cls(
            config,
            metrics,
            pools,
            models,
            upstream_factory,
            routing,
            accounting,
            database,
            auth,
            tracing=tracing,
        )

    def route(self, model: str) -> ModelRoute:
        try:
            return self.models[model]
        except KeyError:
            raise ModelNotFound(model) from None

    async def start(self) -> None:
        """Open one upstream client per pool, check every replica once, then keep checking."""
        if self.config.storage.migrate_on_start:
            await self.database.migrate(all_migrations())
        if self.auth is not None:
            await self.auth.start()
        await self.open_pools(self.pools.values())
        await self.accounting.start(self.database)

    async def open_pools(self, pools: Iterable[Pool]) -> None:
        """Open the pools' clients, check their replicas once, then keep checking them (until
        :meth:`stop`, or until a config reload retires the pool)."""
        pools = list(pools)
        for pool in pools:
            self.clients[pool.name] = self.upstream_factory(pool.config)
        await asyncio.gather(*(check_once(pool, self._probe_for(pool)) for pool in pools))
        for pool in pools:
            task = asyncio.create_task(check_forever(pool, self._probe_for(pool)))
            self._health_tasks.append(task)

    async def stop(self) -> None:
        for task in self._health_tasks:
            task.cancel()
        for task in self._health_tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._health_tasks.clear()
        for client in self.clients.values():
            await client.aclose()
        self.clients.clear()
        await self.accounting.stop()  # after the requests: flushes the ledger
        if self.auth is not None:
            await self.auth.stop()  # flushes the keys' last-used times
        await self.database.close()  # last: the ledger and auth flush into it
        await asyncio.to_thread(self.tracing.shutdown)  # flush the spans still queued

    def _probe_for(self, pool: Pool) -> ProbeFn:
        client = self.clients[pool.name]
        health = pool.config.health

        async def probe(base_url: str) -> str | None:
            return await client.probe(base_url + health.path, health.timeout)

        return probe


def model_routes(
    config: GatewayConfig, pools: Mapping[str, Pool], routing: Routing
) -> dict[str, ModelRoute]:
    routers = build_routers(config, pools, routing)
    return {
        name: ModelRoute(name, routers[name].pools[0], m.upstream_model, m.owned_by, routers[name])
        for name, m in config.models.items()
    }
