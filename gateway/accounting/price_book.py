"""The prices in force on one replica: the config's, with those set through the admin API laid
over them, kept in step with the store on every replica.

A replica reads the store's overrides at start and then every ``accounting.prices_sync_seconds``
(a few dozen rows at most, so the whole set is read, not a change counter: ids of concurrent
PostgreSQL transactions can commit out of order, and a counter would then skip a change). The
replica that takes a change applies it at once. A request reads :attr:`PriceBook.table` once,
when its ledger row is built, so a swap never splits one request across two prices::

    book = PriceBook(PriceTable.build(config.prices))
    await book.start(PriceStore(database), interval=5.0)
    book.table.price("llama-8b", None)         # the API's price if set, else the config's
    book.configure(PriceTable.build(reloaded.prices))    # a config reload keeps the overrides
    await book.stop()

While the store cannot be read the last prices read stay in force (logged once, and again when
it answers): the ledger rows' ``price_version`` says which price each one used.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Mapping
from typing import Any

from sqlalchemy.exc import SQLAlchemyError

from gateway.accounting.price_store import PriceStore
from gateway.accounting.prices import PriceOverride, PriceSpec, PriceTable, format_price

logger = logging.getLogger(__name__)


class PriceBook:
    def __init__(self, configured: PriceTable) -> None:
        self.configured = configured
        """The config's prices: the default, and what a cleared override falls back to."""
        self.overrides: tuple[PriceOverride, ...] = ()
        self.table = configured
        """What rows are priced with now: swapped whole, never changed in place."""
        self.store: PriceStore | None = None
        self._task: asyncio.Task[None] | None = None
        self._failing = False

    def configure(self, configured: PriceTable) -> None:
        """New config prices (a reload); the API's stay laid over them."""
        self.configured = configured
        self.table = configured.overlaid(self.overrides)

    def apply(self, overrides: tuple[PriceOverride, ...]) -> None:
        if overrides != self.overrides:
            self.overrides = overrides
            self.table = self.configured.overlaid(overrides)
            versions = sorted(o.price.version for o in overrides)
            logger.info("prices from the store applied", extra={"fields": {"versions": versions}})

    async def refresh(self) -> None:
        """Read the store's overrides and apply them (raises the store's error)."""
        if self.store is not None:
            self.apply(tuple(await self.store.overrides()))

    async def start(self, store: PriceStore, interval: float) -> None:
        self.store = store
        await self._refresh_logged()  # before the first request is priced
        self._task = asyncio.create_task(self._poll(interval))

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    async def _poll(self, interval: float) -> None:
        while True:
            await asyncio.sleep(interval)
            await self._refresh_logged()

    async def _refresh_logged(self) -> None:
        try:
            await self.refresh()
        except (SQLAlchemyError, OSError) as err:  # the message may hold SQL: the type only
            if not self._failing:
                logger.error(
                    "prices: the store cannot be read; the last prices read stay in force",
                    extra={"fields": {"error": type(err).__name__}},
                )
            self._failing = True
            return
        if self._failing:
            logger.warning("prices: the store answers again")
        self._failing = False


def override_problem(
    book: PriceBook,
    models: Mapping[str, set[str]],
    model: str,
    variant: str | None,
    spec: PriceSpec,
) -> tuple[str, str] | None:
    """Why ``spec`` may not be set for the entry, as (message, param), checked as config prices
    are (``models``: configured name -> its variants); None if it may."""
    if model not in models:
        return f"prices: no such model in models: {model[:200]!r}", "model"
    if variant is not None and variant not in models[model]:
        return f"prices: model {model} has no such variant: {variant[:200]!r}", "variant"
    # One currency for every price: the config's if it has one, else the API's first.
    currency = book.configured.currency or next(
        (o.currency for o in book.overrides if (o.model, o.variant) != (model, variant)), None
    )
    if currency is not None and spec.currency != currency:
        return f"prices: every price is in {currency} here, got {spec.currency}", "currency"
    return None


def entries(book: PriceBook, models: Mapping[str, set[str]]) -> list[dict[str, Any]]:
    """Every price in force, and every API price not in force, as the API and CLI show them."""
    by_key = {(o.model, o.variant): o for o in book.overrides}
    shown = []
    for (model, variant), price in sorted(book.table.models.items(), key=_order):
        override = by_key.pop((model, variant), None)
        own = override is not None and override.price == price
        shown.append(
            {
                "model": model,
                "variant": variant,
                "source": "admin" if own else "config",
                "currency": book.table.currency,
                "version": price.version,
                "input": format_price(price.input),
                "cached_input": format_price(price.cached_input),
                "output": format_price(price.output),
                "batch_discount": format_price(price.batch_discount_ppm),
                "set_at": override.set_at if own and override else None,
                "set_by": override.set_by if own and override else None,
                "configured": model in models and (variant is None or variant in models[model]),
                "in_force": True,
            }
        )
    for o in by_key.values():  # in another currency than the config's: kept, not applied
        shown.append(
            {
                "model": o.model,
                "variant": o.variant,
                "source": "admin",
                "currency": o.currency,
                "version": o.price.version,
                "in_force": False,
            }
        )
    return shown


def entry(
    book: PriceBook, models: Mapping[str, set[str]], model: str, variant: str | None
) -> dict[str, Any] | None:
    """The entry's own price as :func:`entries` shows it (None: the model's, or none, applies)."""
    found = [e for e in entries(book, models) if (e["model"], e["variant"]) == (model, variant)]
    return found[0] if found else None


def _order(item: tuple[tuple[str, str | None], Any]) -> tuple[str, str]:
    (model, variant), _ = item
    return model, variant or ""
