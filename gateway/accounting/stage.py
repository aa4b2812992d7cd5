"""Stage 3, admit, and its other half, settle: reserve before forwarding, true up afterwards::

    reservation = await accounting.admit(arrival, principal, request, prompt, cap)  # or 429
    ...                                                   # route, forward, relay
    accounting.settle(reservation, outcome)               # exactly once, whatever happened

The reservation covers the counted prompt plus every choice's output cap (``n`` or ``best_of``
times ``max_completion_tokens``, else ``max_tokens``, else the model's default cap) and, when
the key or tenant has a budget, that request's maximum cost: the prompt at the input price and
the output cap at the output price, at the dearest of the model's variants (routing has not
chosen one yet). Settlement keeps what the ledger row says it cost, priced once. ``settle``
is synchronous on purpose: it cannot be cancelled, so a disconnect, an upstream failure or a
server shutdown still settles the reservation and records the ledger row.
"""

from __future__ import annotations

from pathlib import Path

from gateway.accounting.config import AccountingConfig
from gateway.accounting.ledger import Ledger, UsageRow
from gateway.accounting.ledger_sql import SqlLedgerStore
from gateway.accounting.price_book import PriceBook
from gateway.accounting.price_store import PriceStore
from gateway.accounting.prices import NO_PRICES, Price, PriceTable, cost
from gateway.database.database import Database
from gateway.limits.admission import Identity, RateLimiter, Reservation
from gateway.tokens.counting import PromptTokens
from gateway.wire.outcome import Arrival, Outcome
from gateway.wire.request import ParsedRequest


class Accounting:
    def __init__(
        self, config: AccountingConfig, limiter: RateLimiter, prices: PriceTable = NO_PRICES
    ) -> None:
        self.config = config
        self.limiter = limiter
        self.book = PriceBook(prices)
        """The config's prices with the admin API's over them (gateway/accounting/price_book.py)."""
        self.ledger: Ledger | None = None
        limiter.alerter.currency = lambda: self.prices.currency

    @property
    def prices(self) -> PriceTable:
        """The prices in force, swapped whole by a reload or the store's changes: a request
        reads them once, when its row is built."""
        return self.book.table

    async def start(self, database: Database | None) -> None:
        """Read the prices set through the API and keep reading them; start the ledger writer
        on the shared store (no store: no ledger, the config's prices only)."""
        if database is not None:
            await self.book.start(PriceStore(database), self.config.prices_sync_seconds)
        if database is not None and self.config.ledger:
            spill = self.config.ledger_spill_path
            self.ledger = Ledger(
                SqlLedgerStore(database),
                batch_size=self.config.ledger_batch_size,
                interval=self.config.ledger_interval,
                close_timeout=self.config.ledger_close_timeout,
                max_buffered=self.config.ledger_max_buffered,
                spill_path=None if spill is None else Path(spill),
            )
            await self.ledger.start()

    async def stop(self) -> None:
        """Flush the ledger and wait for the limiter's settlements: nothing is lost on SIGTERM."""
        await self.limiter.backend.drain()
        await self.book.stop()
        if self.ledger is not None:
            await self.ledger.close()
        await self.limiter.aclose()

    def reserved_tokens(
        self, request: ParsedRequest, prompt: PromptTokens, default_cap: int | None
    ) -> int:
        cap = request.max_tokens or default_cap or self.limiter.config.default_max_tokens
        return prompt.count() + request.choices * cap

    async def admit(
        self,
        arrival: Arrival,
        principal: Identity | None,
        request: ParsedRequest,
        prompt: PromptTokens,
        default_cap: int | None,
        model: str | None = None,
    ) -> Reservation:
        """Reserve for the caller's key and tenant (without a principal, authentication off,
        every caller shares the default limits); raises the 429 or the policy's 503. ``model``
        is the configured model's name, which prices are keyed by (default: the request's)."""
        subjects = self.limiter.subjects(principal)
        if not subjects:  # nothing limits this caller: not even the tokens need counting
            return Reservation(None, 0)
        tokens = self.reserved_tokens(request, prompt, default_cap)
        money = 0
        if any(s.limits.budget is not None for s in subjects):
            name = request.model if model is None else model
            money = self.maximum_cost(name, prompt.count(), tokens - prompt.count())
        return await self.limiter.admit(arrival.request_id, subjects, tokens, money)

    def maximum_cost(self, model: str, prompt_tokens: int, output_tokens: int) -> int:
        """The most a request can be billed: no cached discount, the dearest variant's prices."""
        price = self.prices.highest(model)
        if price is None:
            return 0  # an unpriced model costs nothing: no budget holds it back
        return cost(price, input_tokens=prompt_tokens, cached_tokens=0, output_tokens=output_tokens)

    def settle(self, reservation: Reservation, outcome: Outcome) -> None:
        """True the reservation up to the outcome's usage and cost, record its ledger row."""
        price = _price(outcome, self.prices)
        charged = 0 if price is None else outcome_cost(outcome, price)
        self.limiter.settle(reservation, outcome.usage.total, charged)
        # A batch line's row is written by its runner, in the transaction that marks the line
        # done (gateway/batches/runner.py): a line is billed once even if its replica dies.
        if self.ledger is not None and outcome.batch_id is None:
            self.ledger.record(ledger_row(outcome, self.prices))


def _price(outcome: Outcome, prices: PriceTable) -> Price | None:
    return prices.price(outcome.model or "", outcome.route.variant)


def outcome_cost(outcome: Outcome, price: Price) -> int:
    """The request's cost: the usage billed at the price of the model and variant served. The
    ledger row and the budget's settlement both take it from here."""
    usage = outcome.usage
    return cost(
        price,
        input_tokens=usage.input_tokens,
        cached_tokens=usage.cached_tokens,
        output_tokens=usage.output_tokens,
        batch=outcome.batch_id is not None,
    )


def ledger_row(outcome: Outcome, prices: PriceTable = NO_PRICES) -> UsageRow:
    """The request's row, priced here and only here: the usage billed (a cut stream's counted
    usage, a retried request's final attempt) at the price of the model and variant served."""
    usage, route, ttft = outcome.usage, outcome.route, outcome.time_to_first_token
    model = outcome.model or ""
    price = _price(outcome, prices)
    return UsageRow(
        created_at=outcome.arrival.started_wall,
        request_id=outcome.arrival.request_id,
        tenant_id=outcome.tenant_id,
        key_id=outcome.key_id,
        model=model,
        pool=route.pool,
        variant=route.variant,
        input_tokens=usage.input_tokens,
        output_tokens=usage.output_tokens,
        cached_tokens=usage.cached_tokens,
        ttft_ms=None if ttft is None else ttft * 1000,
        duration_ms=outcome.duration * 1000,
        status=outcome.status,
        partial=usage.partial,
        correlation_id=outcome.arrival.correlation_id,
        operation=None if outcome.operation is None else outcome.operation.value,
        cost_micros=None if price is None else outcome_cost(outcome, price),
        price_version=None if price is None else price.version,
        batch_id=outcome.batch_id,
    )
