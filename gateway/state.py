"""What one gateway app holds while it runs: built by the factory, started by the lifespan."""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from gateway.config import GatewayConfig, PoolConfig
from gateway.errors import ModelNotFound
from gateway.metrics import GatewayMetrics
from gateway.proxy.upstream import AiohttpUpstream, UpstreamClient
from gateway.routing.pools import Pool, ProbeFn, check_forever, check_once
from gateway.telemetry import Tracing, TracingConfig, build_tracing

UpstreamFactory = Callable[[PoolConfig], UpstreamClient]


@dataclass(frozen=True, slots=True)
class ModelRoute:
    name: str
    pool: Pool
    upstream_model: str | None
    owned_by: str


@dataclass(slots=True)
class GatewayState:
    config: GatewayConfig
    metrics: GatewayMetrics
    pools: dict[str, Pool]
    models: dict[str, ModelRoute]
    upstream_factory: UpstreamFactory
    started_at: int = field(default_factory=lambda: int(time.time()))
    clients: dict[str, UpstreamClient] = field(default_factory=dict)
    _health_tasks: list[asyncio.Task[None]] = field(default_factory=list)
    tracing: Tracing = field(default_factory=lambda: build_tracing(TracingConfig(), {}))

    @classmethod
    def build(
        cls, config: GatewayConfig, upstream_factory: UpstreamFactory = AiohttpUpstream
    ) -> GatewayState:
        pools = {name: Pool(name, pool) for name, pool in config.pools.items()}
        models = {
            name: ModelRoute(name, pools[m.pool], m.upstream_model, m.owned_by)
            for name, m in config.models.items()
        }
        tracing = build_tracing(config.tracing, os.environ)
        return cls(config, GatewayMetrics(), pools, models, upstream_factory, tracing=tracing)

    def route(self, model: str) -> ModelRoute:
        try:
            return self.models[model]
        except KeyError:
            raise ModelNotFound(model) from None

    async def start(self) -> None:
        """Open one upstream client per pool, check every replica once, then keep checking."""
        for name, pool in self.pools.items():
            self.clients[name] = self.upstream_factory(pool.config)
        await asyncio.gather(
            *(check_once(pool, self._probe_for(pool)) for pool in self.pools.values())
        )
        for pool in self.pools.values():
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
        await asyncio.to_thread(self.tracing.shutdown)  # flush the spans still queued

    def _probe_for(self, pool: Pool) -> ProbeFn:
        client = self.clients[pool.name]
        health = pool.config.health

        async def probe(base_url: str) -> str | None:
            return await client.probe(base_url + health.path, health.timeout)

        return probe
