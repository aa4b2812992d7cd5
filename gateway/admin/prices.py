"""Prices' part of the admin API (admin keys only, like everything under ``/admin/``).

    GET    /admin/prices                                  every price in force: config or admin
    GET    /admin/prices/{model}                          the model's (and its variants')
    PUT    /admin/prices/{model}                          {"currency", "input", "output",
    PUT    /admin/prices/{model}/variants/{variant}        "cached_input"?, "batch_discount"?}
    DELETE /admin/prices/{model}                          the API's price gone: the config's
    DELETE /admin/prices/{model}/variants/{variant}       (if any) applies again

A price set here is stored in the gateway's database with a version of its own
(``USD-admin-7``), applied at once on this replica and within ``accounting.prices_sync_seconds``
on the others (gateway/accounting/price_book.py); each ledger row keeps the version it used. It
is checked as config prices are: an unknown model or variant, a negative or over-fine price, a
missing currency or another than the other prices' are 400s. Each entry stands alone: a
model's price does not replace its variants' own.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Protocol

from sqlalchemy.exc import SQLAlchemyError
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

from gateway.accounting.price_book import entries, entry, override_problem
from gateway.accounting.prices import PriceSpec, price_parts
from gateway.accounting.stage import Accounting
from gateway.admin.api import _json, _spec
from gateway.auth.keys import parse_key
from gateway.auth.middleware import presented_token
from gateway.auth.service import AuthService
from gateway.clock import Clock
from gateway.errors import InvalidParameter, KeyStoreUnavailable, ModelNotFound, NotFound
from gateway.runtime.table import RoutingTable

logger = logging.getLogger(__name__)
Endpoint = Callable[[Request], Awaitable[Response]]


class PricesState(Protocol):
    """What the prices API reads: the models configured now, the accounting whose price book
    it changes, the clock a change is dated by (the app's ``GatewayState`` is one)."""

    @property
    def table(self) -> RoutingTable: ...
    @property
    def accounting(self) -> Accounting: ...
    @property
    def clock(self) -> Clock: ...


def price_admin_routes(state: PricesState, auth: AuthService | None) -> list[BaseRoute]:
    """The /admin/prices routes (none when authentication or the admin API is off: a price is
    never set by an unauthenticated caller)."""
    if auth is None or not auth.config.admin_api:
        return []
    api = PricesAdmin(state)
    variant = "/admin/prices/{model:path}/variants/{variant}"
    model = "/admin/prices/{model:path}"
    # The variant path first: ``{model:path}`` would take ``m/variants/v`` whole.
    return [
        Route("/admin/prices", _translated(api.show_all), methods=["GET"]),
        Route(variant, _translated(api.show), methods=["GET"]),
        Route(variant, _translated(api.put), methods=["PUT"]),
        Route(variant, _translated(api.clear), methods=["DELETE"]),
        Route(model, _translated(api.show), methods=["GET"]),
        Route(model, _translated(api.put), methods=["PUT"]),
        Route(model, _translated(api.clear), methods=["DELETE"]),
    ]


class PricesAdmin:
    def __init__(self, state: PricesState) -> None:
        self.state = state

    @property
    def _models(self) -> dict[str, set[str]]:
        return {name: set(m.variants or ()) for name, m in self.state.table.config.models.items()}

    async def show_all(self, request: Request) -> Response:
        book = self.state.accounting.book
        data = entries(book, self._models)
        return _json({"object": "list", "currency": book.table.currency, "data": data})

    async def show(self, request: Request) -> Response:
        model, variant = _entry(request)
        data = [
            e
            for e in entries(self.state.accounting.book, self._models)
            if e["model"] == model and (variant is None or e["variant"] == variant)
        ]
        if not data and model not in self._models:
            raise ModelNotFound(model)
        return _json({"object": "list", "data": data})

    async def put(self, request: Request) -> Response:
        model, variant = _entry(request)
        spec = await _spec(request, PriceSpec)
        book = self.state.accounting.book
        problem = override_problem(book, self._models, model, variant, spec)
        if problem is not None:
            raise InvalidParameter(problem[0], param=problem[1])
        assert book.store is not None  # started with the app: the app always has a store
        override = await book.store.put(
            model, variant, spec.currency, price_parts(spec), by=_by(request),
            now=self.state.clock.wall(),
        )  # fmt: skip
        await book.refresh()  # this replica at once; the others at their next read
        fields = {"model": model, "variant": variant, "version": override.price.version}
        logger.warning("price set through the admin API", extra={"fields": fields})
        return _json(entry(book, self._models, model, variant))

    async def clear(self, request: Request) -> Response:
        model, variant = _entry(request)
        book = self.state.accounting.book
        assert book.store is not None
        if not await book.store.clear(model, variant, by=_by(request), now=self.state.clock.wall()):
            raise NotFound(f"No price was set through the API for {_name(model, variant)}.")
        await book.refresh()
        logger.warning(
            "price cleared through the admin API",
            extra={"fields": {"model": model, "variant": variant}},
        )
        body = {"model": model, "variant": variant, "deleted": True}
        return _json({**body, "price": entry(book, self._models, model, variant)})


def _entry(request: Request) -> tuple[str, str | None]:
    return request.path_params["model"], request.path_params.get("variant")


def _name(model: str, variant: str | None) -> str:
    return model[:200] if variant is None else f"{model[:200]} variant {variant[:200]}"


def _by(request: Request) -> str | None:
    """The admin key's public id (the middleware has checked the key; its secret is not kept)."""
    token = presented_token(request.scope)
    key = None if token is None else parse_key(token)
    return None if key is None else key.public_id


def _translated(endpoint: Endpoint) -> Endpoint:
    async def call(request: Request) -> Response:
        try:
            return await endpoint(request)
        except (SQLAlchemyError, OSError) as err:  # the message may hold SQL parameters
            logger.error("admin API: the price store failed: %s", type(err).__name__)
            raise KeyStoreUnavailable("The gateway's store is unavailable; try again.") from None

    return call
