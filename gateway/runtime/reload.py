"""Configuration reload without a restart (SIGHUP or the admin API).

The new file is loaded and validated first; an invalid one is refused and the old configuration
keeps serving. A valid one becomes a new routing table, swapped in at once: unchanged pools keep
their objects (replica health, breakers, outstanding counts, client); new or changed pools get
their own clients; requests already running finish on the table they started with, and a
replaced pool's client closes only once the last of them has ended, so streams in progress are
not dropped and never find their pool gone. Routers carry their variants' rollbacks and windows over
unless the operator changed that variant. Only the routing sections are reloaded (pools,
models, tokenizer, retries) and the prices; the others need a restart::

    reloader = ConfigReloader(state, Path("gateway.yaml"))
    await reloader.reload()     # raises ConfigError, and changes nothing, if the file is bad
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
from collections.abc import Coroutine, Iterable, Iterator
from pathlib import Path
from typing import Any, Protocol

from gateway.accounting.prices import PriceTable
from gateway.accounting.stage import Accounting
from gateway.clock import Clock
from gateway.config import ConfigError, GatewayConfig, load_config
from gateway.routing.canary_judges import Canaries
from gateway.routing.metrics import RoutingMetrics
from gateway.routing.pools import Pool
from gateway.runtime.table import (
    RoutingTable,
    UpstreamFactory,
    build_table,
    model_counters,
    retired_pools,
)
from gateway.tokens import TokenCounter, TokenizerUnavailable

logger = logging.getLogger(__name__)

_DRAIN_POLL_SECONDS = 0.1


class Reloadable(Protocol):
    """What a reload reads and swaps: the table (written), what a new one is built from, and
    the health checks a new pool starts with, the accounting whose prices it swaps (the app's
    ``GatewayState`` is one)."""

    table: RoutingTable

    @property
    def upstream_factory(self) -> UpstreamFactory: ...
    @property
    def routing_metrics(self) -> RoutingMetrics: ...
    @property
    def canaries(self) -> Canaries: ...
    @property
    def clock(self) -> Clock: ...
    @property
    def accounting(self) -> Accounting: ...

    async def watch_pools(self, pools: Iterable[Pool]) -> None: ...


class ConfigReloader:
    def __init__(self, state: Reloadable, path: Path) -> None:
        self.state = state
        self.path = path
        self._lock = asyncio.Lock()
        self._tasks: set[asyncio.Task[None]] = set()

    async def reload(self) -> GatewayConfig:
        """Load, validate and apply the file; on any problem raise ConfigError, change nothing."""
        metrics = self.state.routing_metrics
        async with self._lock:
            try:
                loaded = await asyncio.to_thread(load_config, self.path)
                config = _routing_part(self.state.table.config, loaded)
                counters = await asyncio.to_thread(model_counters, config)
            except (ConfigError, TokenizerUnavailable) as err:
                metrics.reloads.labels("refused").inc()
                logger.error("config reload refused", extra={"fields": {"error": str(err)}})
                raise ConfigError(str(err)) from None
            await self._apply(config, counters)
            metrics.reloads.labels("applied").inc()
            logger.warning("config reloaded", extra={"fields": {"path": str(self.path)}})
            return config

    async def _apply(self, config: GatewayConfig, counters: dict[str, TokenCounter]) -> None:
        state = self.state
        old = state.table
        new = build_table(
            config,
            state.upstream_factory,
            state.routing_metrics,
            old,
            counters,
            shared_canary=state.canaries.shared,
            clock=state.clock,
        )
        fresh = [pool for name, pool in new.pools.items() if old.pools.get(name) is not pool]
        await state.watch_pools(fresh)  # first health check before taking traffic
        state.table = new  # the swap: requests started on ``old`` finish on it
        # Rows built from now on; the prices set through the admin API stay laid over them.
        state.accounting.book.configure(PriceTable.build(config.prices))
        retired = retired_pools(old, new)
        for pool in retired:
            pool.retired = True
        self._spawn(_close_when_drained(old, retired))

    def _spawn(self, coro: Coroutine[Any, Any, None]) -> None:
        task = asyncio.create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def reload_in_background(self) -> None:
        """For the signal handler: reload, and log (not raise) a refusal."""

        async def run() -> None:
            with contextlib.suppress(ConfigError):
                await self.reload()

        self._spawn(run())


RELOADED_SECTIONS = ("pools", "models", "tokenizer", "retries", "prices")
"""What a reload changes; the other sections (server, auth, storage, limits, ...) are read once
at start-up by their own components, so they change only on restart."""


def _routing_part(current: GatewayConfig, loaded: GatewayConfig) -> GatewayConfig:
    """The running config with the reloaded sections of ``loaded``; warns about the others."""
    ignored = [
        name
        for name in type(loaded).model_fields
        if name not in RELOADED_SECTIONS and getattr(loaded, name) != getattr(current, name)
    ]
    if ignored:
        logger.warning(
            "config reload: these sections change only on restart",
            extra={"fields": {"sections": ignored}},
        )
    return current.model_copy(update={name: getattr(loaded, name) for name in RELOADED_SECTIONS})


async def _close_when_drained(old: RoutingTable, retired: list[Pool]) -> None:
    """Close the retired pools' clients once no request on the old snapshot is in flight."""
    # Polling, not an Event: signalling one from every request's end would put work on the
    # hot path for the sake of a rare reload.
    while old.in_flight > 0:  # noqa: ASYNC110
        await asyncio.sleep(_DRAIN_POLL_SECONDS)
    for pool in retired:
        await pool.client.aclose()


@contextlib.contextmanager
def reload_on_sighup(reloader: ConfigReloader) -> Iterator[None]:
    """While the block runs, SIGHUP reloads the configuration file."""
    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGHUP, reloader.reload_in_background)
    try:
        yield
    finally:
        loop.remove_signal_handler(signal.SIGHUP)
