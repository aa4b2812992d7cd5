"""The routing table: an immutable snapshot of pools (each with its own client), models and the
routing that serves them, built from a configuration at start-up and on every reload.

A request reads ``state.table`` once and finishes on that snapshot, whatever a reload does
meanwhile: it never looks a pool or a client up by name in a newer table. A reload builds a new
table (unchanged pools carried over with their health, breakers and clients) and swaps one
reference; the old table counts its requests in flight, and pools that only it holds close
their clients once its last request has ended::

    table = build_table(config, upstream_factory, metrics)
    route = table.route("llama", principal)      # or ModelNotFound
    with table.serving():                          # counted in flight on this snapshot
        ...
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from gateway.auth.access import may_see
from gateway.auth.models import Principal
from gateway.clock import SYSTEM_CLOCK, Clock
from gateway.config import GatewayConfig
from gateway.errors import ModelNotFound
from gateway.metrics import GatewayMetrics
from gateway.routing.breaker import BreakerState
from gateway.routing.config import PoolConfig
from gateway.routing.dispatch import Dispatcher, RetryBudget
from gateway.routing.gauges import EngineGauges
from gateway.routing.latency import LatencyBook
from gateway.routing.load import LocalLoadBook
from gateway.routing.metrics import RoutingMetrics
from gateway.routing.policy import SATURATION_REASONS
from gateway.routing.pools import Pool, Replica
from gateway.routing.router import ModelRouter
from gateway.routing.service import Routing
from gateway.tokens import TokenCounter, counters_for_models
from gateway.upstream.client import UpstreamClient
from gateway.values import value

UpstreamFactory = Callable[[PoolConfig], UpstreamClient]


@value
class ModelRoute:
    name: str
    router: ModelRouter
    counter: TokenCounter
    upstream_model: str | None
    owned_by: str
    default_max_tokens: int | None
    """Output tokens reserved when a request gives no cap (None: the limits' default)."""


@dataclass(eq=False, slots=True)
class RoutingTable:
    config: GatewayConfig
    pools: Mapping[str, Pool]
    models: Mapping[str, ModelRoute]
    routing: Routing
    in_flight: int = field(default=0)
    """Requests being served on this snapshot (a reload waits for them before closing the
    clients of pools only this snapshot holds)."""

    def route(self, model: str, principal: Principal | None) -> ModelRoute:
        """The model's route; a model the key may not use answers as if it did not exist."""
        found = self.models.get(model)
        if found is None or not may_see(principal, model):
            raise ModelNotFound(model)
        return found

    @contextlib.contextmanager
    def serving(self) -> Iterator[RoutingTable]:
        self.in_flight += 1
        try:
            yield self
        finally:
            self.in_flight -= 1


def build_routing(
    config: GatewayConfig,
    metrics: RoutingMetrics,
    clock: Clock = SYSTEM_CLOCK,
    latency: LatencyBook | None = None,
) -> Routing:
    """``latency``: the models learned so far (a reload keeps them)."""
    budget = RetryBudget(config.retries, clock.monotonic)
    return Routing(Dispatcher(config.retries, metrics, budget), metrics, latency, clock)


def build_table(
    config: GatewayConfig,
    upstream_factory: UpstreamFactory,
    routing_metrics: RoutingMetrics,
    previous: RoutingTable | None = None,
    counters: Mapping[str, TokenCounter] | None = None,
    *,
    shared_canary: bool = False,
    clock: Clock = SYSTEM_CLOCK,
    book: LocalLoadBook | None = None,
) -> RoutingTable:
    """A table for ``config``; pools unchanged since ``previous`` are carried over as they are
    (health, breakers, in-flight counts, client), new or changed ones get a fresh client.
    ``shared_canary``: the deployment judges canaries from shared samples, not each router;
    ``clock``: the app's (breakers, retry budget, canary windows); ``book``: the app's load
    book, where every pool's load is counted (None: the previous table's, or a new one)."""
    kept = {} if previous is None else previous.pools
    if book is None:
        book = _book_of(previous) or LocalLoadBook(clock.monotonic)
    pools: dict[str, Pool] = {}
    for name, pool_config in config.pools.items():
        old = kept.get(name)
        if old is not None and old.config == pool_config and old.book is book:
            pools[name] = old
        else:
            client = upstream_factory(pool_config)
            pools[name] = Pool(name, pool_config, client=client, clock=clock.monotonic, book=book)
    if counters is None:
        counters = model_counters(config)
    if previous is not None and config.retries == previous.config.retries:
        routing = previous.routing
    else:
        latency = None if previous is None else previous.routing.latency
        routing = build_routing(config, routing_metrics, clock, latency)
    models = {}
    for name, model in config.models.items():
        router = ModelRouter(name, model, pools, clock.monotonic, clock.wall)
        router.on_rollback = routing.on_rollback(router)
        router.judge_locally = not shared_canary
        if previous is not None and name in previous.models:
            router.carry_over(previous.models[name].router)
        models[name] = ModelRoute(
            name,
            router,
            counters[name],
            model.upstream_model,
            model.owned_by,
            model.default_max_tokens,
        )
    publish_weights((m.router for m in models.values()), routing_metrics)
    return RoutingTable(config, pools, models, routing)


def _book_of(table: RoutingTable | None) -> LocalLoadBook | None:
    if table is None or not table.pools:
        return None
    return next(iter(table.pools.values())).book


def model_counters(config: GatewayConfig) -> dict[str, TokenCounter]:
    """Token counters (tokenizers load here, not on the first request)."""
    return counters_for_models(
        config.tokenizer, [(name, m.tokenizer) for name, m in config.models.items()]
    )


def retired_pools(old: RoutingTable, new: RoutingTable) -> list[Pool]:
    """Pools of ``old`` that ``new`` no longer holds."""
    return [pool for name, pool in old.pools.items() if new.pools.get(name) is not pool]


def publish_weights(routers: Iterable[ModelRouter], metrics: RoutingMetrics) -> None:
    for router in routers:
        for variant in router.variants.values():
            metrics.variant_weight.labels(router.name, variant.name).set(variant.weight)
            metrics.rolled_back.labels(router.name, variant.name).set(int(variant.rolled_back))


def replica_status(pool: Pool, replica: Replica) -> dict[str, Any]:
    """A replica as /readyz shows it (its load: this gateway's, in the load book)."""
    outstanding, tokens = pool.book.replica_counts(pool, replica)
    book = pool.book
    gauges = (
        book.engine(pool.name, replica.label)
        if book.has_replica_gauges(pool.name, replica.label)
        else None
    )
    return {
        "url": replica.label,  # user:pass@ redacted
        "healthy": replica.healthy,
        "error": replica.last_error,
        "breaker": replica.breaker.state.value,
        "last_failure": replica.last_failure,
        "outstanding": outstanding,
        "prompt_tokens_in_flight": tokens,
        "engine": _engine(gauges),
    }


def _engine(gauges: EngineGauges | None) -> dict[str, Any] | None:
    reading = None if gauges is None else gauges.fresh()
    if reading is None:
        return None
    return {"running": reading.running, "waiting": reading.waiting, "kv_usage": reading.kv_usage}


def load_status(pool: Pool) -> dict[str, Any]:
    """A pool's load as the admin API and the console show it: the gateway's own view, the
    other gateways' (shared load), the engines' gauges (with their age), the saturation bound
    it is past, the prefix index (all of it the load book's)."""
    return pool.book.show(pool)


def publish_pool_state(
    metrics: GatewayMetrics, routing_metrics: RoutingMetrics, pools: Iterable[Pool]
) -> None:
    """Refresh the pool gauges (called when /metrics is scraped, not per request)."""
    for pool in pools:
        metrics.pool_healthy.labels(pool.name).set(1 if pool.healthy else 0)
        publish_load(routing_metrics, pool)
        for replica in pool.replicas:
            label = replica.label  # user:pass@ redacted
            outstanding = pool.book.replica_counts(pool, replica)[0]
            metrics.replica_healthy.labels(pool.name, label).set(1 if replica.healthy else 0)
            metrics.replica_outstanding.labels(pool.name, label).set(outstanding)
            is_open = replica.breaker.state is not BreakerState.CLOSED
            routing_metrics.breaker_open.labels(pool.name, label).set(1 if is_open else 0)


def publish_load(metrics: RoutingMetrics, pool: Pool) -> None:
    name = pool.name
    book = pool.book
    in_flight, _, tokens = book.own(name)
    metrics.pool_in_flight.labels(name).set(in_flight)
    metrics.pool_prompt_tokens.labels(name).set(tokens)
    past = pool.saturation()
    for reason in SATURATION_REASONS:
        metrics.pool_saturated.labels(name, reason).set(1 if past == reason else 0)
    gauges = book.engine(name)
    age = gauges.age()
    metrics.engine_signal_age.labels(name).set(-1 if age is None else age)
    metrics.engine_signal_fresh.labels(name).set(0 if gauges.fresh() is None else 1)
    latest = gauges.latest
    if latest is not None:
        metrics.engine_waiting.labels(name).set(latest.waiting)
        metrics.engine_running.labels(name).set(latest.running)
        if latest.kv_usage is not None:
            metrics.engine_kv_usage.labels(name).set(latest.kv_usage)
    metrics.prefix_index_blocks.labels(name).set(book.index_size(pool))
