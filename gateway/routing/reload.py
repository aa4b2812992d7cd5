"""Configuration reload without a restart (SIGHUP or the admin API).

The new file is loaded and validated first; an invalid one is refused and the old configuration
keeps serving. A valid one is swapped in at once: unchanged pools keep their objects (replica
health, breakers, outstanding counts); new or changed pools get their own clients; a replaced
pool is retired, and its client closes only once its last in-flight request has finished, so
streams in progress are not dropped. Routers carry their variants' rollbacks and windows over
unless the operator changed that variant. Only the routing sections are reloaded (pools,
models, tokenizer, retries); the others need a restart::

    reloader = ConfigReloader(state, Path("gateway.yaml"))
    await reloader.reload()     # raises ConfigError, and changes nothing, if the file is bad
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
from collections.abc import Coroutine, Iterator
from pathlib import Path
from typing import Any

from gateway.accounting.tokens import TokenCounter, TokenizerUnavailable, counters_for_models
from gateway.config import ConfigError, GatewayConfig, load_config
from gateway.proxy.upstream import UpstreamClient
from gateway.routing.dispatch import Dispatcher
from gateway.routing.pools import Pool
from gateway.state import GatewayState, model_routes

logger = logging.getLogger(__name__)

_DRAIN_POLL_SECONDS = 0.1


class ConfigReloader:
    def __init__(self, state: GatewayState, path: Path) -> None:
        self.state = state
        self.path = path
        self._lock = asyncio.Lock()
        self._tasks: set[asyncio.Task[None]] = set()

    async def reload(self) -> GatewayConfig:
        """Load, validate and apply the file; on any problem raise ConfigError, change nothing."""
        async with self._lock:
            try:
                config = await asyncio.to_thread(load_config, self.path)
                counters = await asyncio.to_thread(
                    counters_for_models,
                    config.tokenizer,
                    [(name, m.tokenizer) for name, m in config.models.items()],
                )
            except (ConfigError, TokenizerUnavailable) as err:
                self.state.routing.metrics.reloads.labels("refused").inc()
                logger.error("config reload refused", extra={"fields": {"error": str(err)}})
                raise ConfigError(str(err)) from None
            await self._apply(config, counters)
            self.state.routing.metrics.reloads.labels("applied").inc()
            logger.warning("config reloaded", extra={"fields": {"path": str(self.path)}})
            return config

    async def _apply(self, loaded: GatewayConfig, counters: dict[str, TokenCounter]) -> None:
        state = self.state
        config = _routing_part(state.config, loaded)
        kept, fresh, retired = _diff_pools(state.pools, config)
        old_clients = {pool.name: state.clients[pool.name] for pool in retired}
        await state.open_pools(fresh.values())  # first health check before taking traffic
        pools = {**kept, **fresh}
        routing = state.routing
        routing.counters = counters
        if config.retries != state.config.retries:
            routing.dispatcher = Dispatcher(config.retries, routing.metrics)
        models = model_routes(config, pools, routing)
        for name, route in models.items():
            previous = state.models.get(name)
            if previous is not None:
                route.router.carry_over(previous.router)
        # The swap: one synchronous block, so no request sees half of each configuration.
        state.config, state.pools, state.models = config, pools, models
        for pool in retired:
            pool.retired = True
            if pool.name not in fresh:
                del state.clients[pool.name]
            self._spawn(_close_when_drained(pool, old_clients[pool.name]))

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


RELOADED_SECTIONS = ("pools", "models", "tokenizer", "retries")
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


def _diff_pools(
    current: dict[str, Pool], config: GatewayConfig
) -> tuple[dict[str, Pool], dict[str, Pool], list[Pool]]:
    """(pools kept as they are, new or changed pools, pools to retire)."""
    kept: dict[str, Pool] = {}
    fresh: dict[str, Pool] = {}
    for name, pool_config in config.pools.items():
        old = current.get(name)
        if old is not None and old.config == pool_config:
            kept[name] = old
        else:
            fresh[name] = Pool(name, pool_config)
    retired = [pool for name, pool in current.items() if name not in kept]
    return kept, fresh, retired


async def _close_when_drained(pool: Pool, client: UpstreamClient) -> None:
    # Polling, not an Event: signalling one from every request's release would put work on the
    # hot path for the sake of a rare reload.
    while pool.in_flight > 0:  # noqa: ASYNC110
        await asyncio.sleep(_DRAIN_POLL_SECONDS)
    await client.aclose()


@contextlib.contextmanager
def reload_on_sighup(reloader: ConfigReloader) -> Iterator[None]:
    """While the block runs, SIGHUP reloads the configuration file."""
    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGHUP, reloader.reload_in_background)
    try:
        yield
    finally:
        loop.remove_signal_handler(signal.SIGHUP)
