"""What one gateway app holds while it runs: built by the factory, started by the lifespan.

The routing part is one immutable snapshot (:class:`RoutingTable`) behind ``state.table``; a
reload swaps that one reference. Everything else (metrics, accounting, the store, auth, tracing)
lives as long as the app.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
from collections.abc import Iterable
from dataclasses import dataclass, field

from gateway.accounting.prices import PriceTable
from gateway.accounting.stage import Accounting
from gateway.auth.service import AuthService, build_auth
from gateway.batches.service import Batches
from gateway.clock import SYSTEM_CLOCK, Clock
from gateway.config import GatewayConfig
from gateway.database import Database
from gateway.extras import require
from gateway.flow.gate import FlowGate
from gateway.flow.metrics import FlowMetrics
from gateway.limits.admission import RateLimiter
from gateway.metrics import GatewayMetrics
from gateway.response_store.service import StoredResponses
from gateway.routing.canary_judges import Canaries, LocalCanaries
from gateway.routing.latency import LatencyBook
from gateway.routing.load import LocalLoadBook
from gateway.routing.metrics import RoutingMetrics
from gateway.routing.outcomes import OutcomeFeed
from gateway.routing.pools import Pool, ProbeFn, check_forever, check_once
from gateway.routing.router import ModelRouter
from gateway.routing.signals import EngineSignals
from gateway.runtime.migrations import all_migrations
from gateway.runtime.table import RoutingTable, UpstreamFactory, build_table
from gateway.server.loop_watch import LoopWatch
from gateway.telemetry import Tracing, TracingConfig, build_tracing
from gateway.upstream.http1 import Http1Upstream

__all__ = ["GatewayState", "UpstreamFactory"]


@dataclass(slots=True)
class GatewayState:
    config: GatewayConfig
    """The configuration the app started with (reloads change only ``table.config``)."""
    metrics: GatewayMetrics
    routing_metrics: RoutingMetrics
    table: RoutingTable
    upstream_factory: UpstreamFactory
    accounting: Accounting
    database: Database
    auth: AuthService | None
    """None when ``auth.enabled`` is false: no keys asked, every model visible."""
    canaries: Canaries
    """Where canary judgements are made: each router's own, or the deployment's (Redis)."""
    responses: StoredResponses
    """Stored Responses API answers, in the same store (gateway/response_store/)."""
    batches: Batches
    """Batch files and jobs, in the same store (gateway/batches/); run by the app's runner."""
    clock: Clock = SYSTEM_CLOCK
    """What every part of the app reads the time from (gateway/clock.py)."""
    started_at: int = field(default_factory=lambda: int(time.time()))
    _health_tasks: list[asyncio.Task[None]] = field(default_factory=list)
    tracing: Tracing = field(default_factory=lambda: build_tracing(TracingConfig(), {}))
    flow: FlowGate | None = None
    """Flow control's queue (None when ``flow.enabled`` is off)."""
    signals: EngineSignals = field(default_factory=EngineSignals)
    """Reads the engines' vLLM gauges for the pools that name where."""
    load: LocalLoadBook = field(default_factory=LocalLoadBook)
    """The load book: every load figure routing and flow control read (gateway/routing/load.py),
    shared with the other gateway replicas where ``load_sharing`` says so."""
    outcomes: OutcomeFeed = field(default_factory=OutcomeFeed)
    """Each settled exchange, as its replica delivered it, to the subscribers ``create_app``
    registers (gateway/routing/outcomes.py)."""
    loop_watch: LoopWatch = field(default_factory=lambda: LoopWatch(None, None))
    """The event loop's lag probe and the collector's pauses (gateway/server/loop_watch.py)."""

    @property
    def latency(self) -> LatencyBook:
        """TTFT/TPOT models per pool and replica (issue 38): the routing's, which learns each
        request's outcome with the load its pools had at the choice (``routing.latency``)."""
        return self.table.routing.latency

    @classmethod
    def build(
        cls,
        config: GatewayConfig,
        upstream_factory: UpstreamFactory = Http1Upstream,
        clock: Clock = SYSTEM_CLOCK,
    ) -> GatewayState:
        metrics = GatewayMetrics()
        routing_metrics = RoutingMetrics(metrics)
        book = build_load_book(config, clock)
        canaries = build_canaries(config, routing_metrics, clock, book)
        table = build_table(
            config,
            upstream_factory,
            routing_metrics,
            shared_canary=canaries.shared,
            clock=clock,
            book=book,
        )
        limiter = RateLimiter.build(config.limits, metrics, clock)
        accounting = Accounting(config.accounting, limiter, PriceTable.build(config.prices))
        database = Database.open(config.storage)
        flow = FlowGate(config.flow, FlowMetrics(metrics)) if config.flow.enabled else None
        return cls(
            config,
            metrics,
            routing_metrics,
            table,
            upstream_factory,
            accounting,
            database,
            build_auth(config.auth, config.storage, database, clock),
            canaries,
            StoredResponses(config.responses, database, metrics, clock.wall),
            Batches(config.batches, database, config.server.max_body_bytes, clock.wall),
            clock,
            started_at=int(clock.wall()),
            tracing=build_tracing(config.tracing, os.environ),
            flow=flow,
            load=book,
            loop_watch=LoopWatch.build(config.server, metrics),
        )

    async def start(self) -> None:
        """Watch the loop; migrate, start auth, check every replica once and keep checking,
        start the ledger."""
        self.loop_watch.start()  # first: a slow start-up shows in its lag too
        if self.config.storage.migrate_on_start:
            await self.database.migrate(all_migrations())
        if self.auth is not None:
            await self.auth.start()
        await self.watch_pools(self.table.pools.values())
        await self.load.start()
        await self.canaries.start(self._routers)
        await self.accounting.start(self.database)
        await self.responses.start()
        if self.config.batches.enabled:
            await self.batches.start()

    def _routers(self) -> list[ModelRouter]:
        return [route.router for route in self.table.models.values()]

    async def watch_pools(self, pools: Iterable[Pool]) -> None:
        """Check the pools' replicas once, then keep checking them (until :meth:`stop`, or until
        a config reload retires the pool)."""
        pools = list(pools)
        await asyncio.gather(*(check_once(pool, _probe_for(pool)) for pool in pools))
        for pool in pools:
            task = asyncio.create_task(check_forever(pool, _probe_for(pool)))
            self._health_tasks.append(task)
            self._health_tasks.extend(self.signals.watch(pool))

    async def stop(self) -> None:
        for task in self._health_tasks:
            task.cancel()
        for task in self._health_tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._health_tasks.clear()
        await self.signals.aclose()
        if self.flow is not None:
            self.flow.queue.close()
        await self.canaries.aclose()
        await self.load.aclose()  # after the canaries: they may share its Redis client
        for pool in self.table.pools.values():
            await pool.client.aclose()
        await self.accounting.stop()  # after the requests: flushes the ledger
        await self.responses.stop()  # after the requests: their last responses written
        await self.batches.stop()
        if self.auth is not None:
            await self.auth.stop()  # flushes the keys' last-used times
        await self.database.close()  # last: the ledger and auth flush into it
        await asyncio.to_thread(self.tracing.shutdown)  # flush the spans still queued
        await self.loop_watch.stop()


def build_load_book(config: GatewayConfig, clock: Clock = SYSTEM_CLOCK) -> LocalLoadBook:
    """The app's load book: this gateway's alone, or shared on Redis (``load_sharing``)."""
    sharing = config.load_sharing
    if sharing.backend != "redis":
        return LocalLoadBook(clock.monotonic)
    require("redis", "load_sharing.backend: redis")
    from gateway.routing.load_redis import RedisLoadBook  # only with the redis extra

    return RedisLoadBook.from_config(sharing, clock.monotonic)


def build_canaries(
    config: GatewayConfig,
    metrics: RoutingMetrics,
    clock: Clock = SYSTEM_CLOCK,
    book: LocalLoadBook | None = None,
) -> Canaries:
    """The deployment's judge where routing's state is shared: on the load book's Redis client
    (``load_sharing``), or, as before, where the rate limits are (its own client); else each
    router's."""
    sharing = config.load_sharing
    client = getattr(book, "redis", None)
    if sharing.backend == "redis" and client is not None:
        from gateway.routing.canary_judges_redis import RedisCanaries  # only with the redis extra

        return RedisCanaries(
            None,
            prefix=sharing.key_prefix + ":canary",
            metrics=metrics,
            timeout=sharing.timeout_seconds,
            clock=clock,
            client=client,
        )
    limits = config.limits
    if limits.enabled and limits.backend == "redis":
        assert limits.redis_url is not None  # the config validator requires it
        require("redis", "limits.backend: redis")
        from gateway.routing.canary_judges_redis import RedisCanaries  # only with the redis extra

        return RedisCanaries(
            limits.redis_url,
            prefix=limits.key_prefix + ":canary",
            metrics=metrics,
            timeout=limits.redis_timeout,
            clock=clock,
        )
    return LocalCanaries(metrics)


def _probe_for(pool: Pool) -> ProbeFn:
    client = pool.client
    health = pool.config.health

    async def probe(base_url: str) -> str | None:
        return await client.probe(base_url + health.path, health.timeout)

    return probe
