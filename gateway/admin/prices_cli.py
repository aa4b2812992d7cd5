"""``pd-gateway prices show|set|clear``: the admin API's prices, on the store directly.

    pd-gateway prices show --config gateway.yaml            # in force: config and store
    pd-gateway prices set llama-8b --currency USD --input 0.10 --output 0.40 --config gateway.yaml
    pd-gateway prices set llama-8b --variant canary --currency USD --input 0.12 --output 0.48 ...
    pd-gateway prices clear llama-8b [--variant canary]    # the config's price applies again

``set`` is checked as the API checks it (the model and variant against the config file, so
``--config`` is required; prices as exact decimals; one currency); running gateways pick the
change up within ``accounting.prices_sync_seconds``. Output is JSON, errors exit 1.
"""

from __future__ import annotations

import argparse
import time
from typing import Any

from gateway.accounting.price_book import PriceBook, entries, entry, override_problem
from gateway.accounting.price_store import PriceStore
from gateway.accounting.prices import NO_PRICES, PriceSpec, PriceTable, price_parts
from gateway.admin.cli import Store, _command
from gateway.auth.manage import InvalidSpec

CLI_ACTOR = "cli"
"""``set_by`` of a change made here (the API records the admin key's id)."""


def price_commands(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="action", required=True)
    show = _command(sub, "show", _show, "prices in force (with --config: the config's too)")
    show.add_argument("model", nargs="?")
    put = _command(sub, "set", _set, "set a model's or variant's price (needs --config)")
    put.add_argument("model")
    put.add_argument("--variant")
    put.add_argument("--currency", required=True, help="ISO 4217, as prices.currency")
    put.add_argument("--input", required=True, help="per million prompt tokens, e.g. 0.10")
    put.add_argument("--cached-input", help="per million cached prompt tokens (default: input)")
    put.add_argument("--output", required=True, help="per million output tokens")
    put.add_argument("--batch-discount", help="the fraction off for batch work, e.g. 0.5")
    clear = _command(sub, "clear", _clear, "remove a price set through the API or this CLI")
    clear.add_argument("model")
    clear.add_argument("--variant")


async def _book(store: Store) -> tuple[PriceBook, dict[str, set[str]]]:
    """The prices as a gateway on ``store.config`` would have them, and its models."""
    config = store.config
    book = PriceBook(NO_PRICES if config is None else PriceTable.build(config.prices))
    book.store = PriceStore(store.db)
    await book.refresh()
    models = {} if config is None else {n: set(m.variants or ()) for n, m in config.models.items()}
    return book, models


async def _show(args: argparse.Namespace, store: Store) -> Any:
    book, models = await _book(store)
    data = [e for e in entries(book, models) if args.model in (None, e["model"])]
    return {"object": "list", "currency": book.table.currency, "data": data}


async def _set(args: argparse.Namespace, store: Store) -> Any:
    if store.config is None:
        raise InvalidSpec("prices set needs --config: the model is checked against its models")
    spec = PriceSpec.model_validate(
        {
            "currency": args.currency,
            "input": args.input,
            "cached_input": args.cached_input,
            "output": args.output,
            **({} if args.batch_discount is None else {"batch_discount": args.batch_discount}),
        }
    )
    book, models = await _book(store)
    problem = override_problem(book, models, args.model, args.variant, spec)
    if problem is not None:
        raise InvalidSpec(problem[0])
    assert book.store is not None
    await book.store.put(
        args.model, args.variant, spec.currency, price_parts(spec), by=CLI_ACTOR, now=time.time()
    )
    await book.refresh()
    return entry(book, models, args.model, args.variant)


async def _clear(args: argparse.Namespace, store: Store) -> Any:
    book, models = await _book(store)
    assert book.store is not None
    if not await book.store.clear(args.model, args.variant, by=CLI_ACTOR, now=time.time()):
        raise InvalidSpec(f"no price was set through the API for {args.model}")
    await book.refresh()
    price = entry(book, models, args.model, args.variant)
    return {"model": args.model, "variant": args.variant, "deleted": True, "price": price}
