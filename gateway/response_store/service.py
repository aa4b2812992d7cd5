"""What the pipeline asks of stored responses: a request's turn, and keeping its response.

    service = StoredResponses(config.responses, database, metrics)
    request, turn = await service.parse(body, request_id, principal, limit, shape)
        # previous_response_id looked up for the key's tenant (404 when absent, expired or
        # another tenant's), its conversation put before the new input, then translated: the
        # prompt is counted, limited, routed and billed as the whole conversation it became
    translator_for(request, request_id, native=..., keeper=turn)
        # the relay awaits turn.keep(response) before the answer's last bytes go out
    turn.settle(ending)          # the record stage: a stream cut before its end is kept as far
                                 # as it got (cancelled: the client left; failed: the gateway)

Each response is stored once (a write is never repeated for one turn, and the store ignores a
second insert of an id). Expired rows are swept in the background every ``expiry_interval``;
reads never see them before that. ``clock`` is the seam tests advance.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import time
from typing import Any

import orjson

from gateway.clock import Reading
from gateway.database.database import Database
from gateway.errors import InvalidParameter, NotFound
from gateway.metrics import GatewayMetrics
from gateway.response_store.config import ResponsesConfig
from gateway.response_store.items import MAX_ID_CHARS, conversation, input_items
from gateway.response_store.store import SqlResponseStore, StoredResponse
from gateway.responses_translation.request import translate, with_default_model
from gateway.responses_translation.stream import ResponseEvents
from gateway.wire.outcome import Ending
from gateway.wire.request import BodyShape, ParsedRequest, load_object

logger = logging.getLogger(__name__)

Json = dict[str, Any]
ANONYMOUS = ""
"""The tenant of every response when keys are off: one caller, one tenant."""
_STATELESS = (
    "This gateway does not store responses (responses.store is off): send the whole "
    "conversation in `input`, with `store` false or omitted."
)


class StoredResponses:
    def __init__(
        self,
        config: ResponsesConfig,
        database: Database,
        metrics: GatewayMetrics,
        clock: Reading = time.time,
    ) -> None:
        self.config = config
        self.store = SqlResponseStore(database)
        self.clock = clock
        self.kept = metrics.counter(
            "gateway_stored_responses",
            "Responses the gateway tried to store, by result (stored, too_large, failed)",
            ["result"],
        )
        # No labels: its one series, shown from the start (at 0).
        self.expired = metrics.counter(
            "gateway_stored_responses_expired",
            "Stored responses removed by the retention sweep",
            [],
        ).labels()
        self._writes: set[asyncio.Task[None]] = set()
        self._sweeper: asyncio.Task[None] | None = None

    # --- the pipeline's side ---------------------------------------------------------------

    async def parse(
        self,
        body: bytes,
        request_id: str,
        tenant_id: str | None,
        key_id: str | None,
        max_tokens_limit: int,
        shape: BodyShape,
    ) -> tuple[ParsedRequest, Turn]:
        """The translated request and its turn; a 400 or 404 that says why it cannot be."""
        source = with_default_model(load_object(body, shape), self.config.default_model)
        stored, previous = self._stateful(source)
        tenant = tenant_id or ANONYMOUS
        history: list[Json] = []
        if previous is not None:
            history = await self.conversation_of(previous, tenant)
        request = translate(source, max_tokens_limit, shape, history)
        items = orjson.dumps([*history, *input_items(source["input"], request_id)])
        if stored and len(items) > self.config.max_bytes:
            raise InvalidParameter(
                f"The conversation is {len(items)} bytes, more than this gateway stores for one "
                f"response ({self.config.max_bytes}): send it with `store` false.",
                param="input",
                code="conversation_too_large",
            )
        if history:  # what a native pool gets: the whole conversation, nothing to look up
            native = {k: v for k, v in source.items() if k != "previous_response_id"}
            request = _with_source(request, {**native, "input": history + _listed(source)})
        turn = Turn(self, tenant, key_id, request_id, previous, stored, items)
        return request, turn

    def _stateful(self, source: Json) -> tuple[bool, str | None]:
        store = source.get("store")
        if store is not None and not isinstance(store, bool):
            raise InvalidParameter("`store` must be a boolean.", param="store")
        previous = source.get("previous_response_id")
        if previous is not None and not isinstance(previous, str):
            raise InvalidParameter(
                "`previous_response_id` must be a string.", param="previous_response_id"
            )
        if not self.config.store:
            if store is True:
                raise InvalidParameter(_STATELESS, param="store", code="unsupported_value")
            if previous is not None:
                raise InvalidParameter(
                    _STATELESS, param="previous_response_id", code="unsupported_parameter"
                )
        return self.config.store and store is not False, previous

    async def conversation_of(self, response_id: str, tenant_id: str) -> list[Json]:
        """A stored response's conversation and output, for its tenant only."""
        record = await self.get(response_id, tenant_id)
        if record is None:
            raise NotFound(
                f"Previous response with id '{response_id[:MAX_ID_CHARS]}' not found.",
                param="previous_response_id",
                code="previous_response_not_found",
            )
        return conversation(record.items_json(), record.response_json().get("output"))

    async def get(self, response_id: str, tenant_id: str) -> StoredResponse | None:
        if len(response_id) > MAX_ID_CHARS:
            return None
        return await self.store.get(response_id, tenant_id=tenant_id, now=self.clock())

    def write(self, record: StoredResponse) -> asyncio.Task[None] | None:
        """Start writing ``record`` (None: too large to keep, counted and logged)."""
        if record.size_bytes > self.config.max_bytes:
            self.kept.labels("too_large").inc()
            logger.warning(
                "response not stored: too large",
                extra={"fields": {"response_id": record.id, "bytes": record.size_bytes}},
            )
            return None
        task = asyncio.get_running_loop().create_task(self._put(record))
        self._writes.add(task)
        task.add_done_callback(self._writes.discard)
        return task

    async def _put(self, record: StoredResponse) -> None:
        try:
            await self.store.put(record)
        except Exception:  # the store failed: the client has its answer, the row is lost
            self.kept.labels("failed").inc()
            logger.exception("response not stored", extra={"fields": {"response_id": record.id}})
        else:
            self.kept.labels("stored").inc()

    # --- lifetime ---------------------------------------------------------------------------

    async def start(self) -> None:
        if self.config.store:
            self._sweeper = asyncio.create_task(self._sweep_forever())

    async def sweep(self) -> int:
        """Delete the expired rows now; how many went."""
        removed = await self.store.expire(now=self.clock())
        if removed:
            self.expired.inc(removed)
        return removed

    async def _sweep_forever(self) -> None:
        while True:
            try:
                await self.sweep()
            except Exception:
                logger.exception("expiring stored responses failed; retrying next interval")
            await asyncio.sleep(self.config.expiry_interval)

    async def stop(self) -> None:
        """Stop sweeping; wait for the writes in progress (the store is closed after this)."""
        if self._sweeper is not None:
            self._sweeper.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._sweeper
        if self._writes:
            await asyncio.wait(set(self._writes), timeout=self.config.write_timeout)


class Turn:
    """One Responses request's part in the store: what it continues, whether and how its response
    is kept (the translator's :class:`~gateway.responses_translation.translator.Keeper`)."""

    __slots__ = (
        "_events",
        "_items",
        "_kept",
        "created_at",
        "key_id",
        "previous_response_id",
        "request_id",
        "service",
        "stored",
        "tenant_id",
    )

    def __init__(
        self,
        service: StoredResponses,
        tenant_id: str,
        key_id: str | None,
        request_id: str,
        previous_response_id: str | None,
        stored: bool,
        items: bytes,
    ) -> None:
        self.service = service
        self.tenant_id = tenant_id
        self.key_id = key_id
        self.request_id = request_id
        self.previous_response_id = previous_response_id
        self.stored = stored
        self.created_at = int(service.clock())
        self._items = items
        self._events: ResponseEvents | None = None
        self._kept = False

    def opened(self, events: ResponseEvents) -> None:
        self._events = events

    async def keep(self, response: Json) -> None:
        """Write the finished response, waiting at most ``write_timeout``; a client that leaves
        meanwhile does not stop the write."""
        task = self._start(response)
        if task is None:
            return
        try:
            await asyncio.wait_for(asyncio.shield(task), self.service.config.write_timeout)
        except TimeoutError:
            logger.warning(
                "stored response still being written as the answer ends",
                extra={"fields": {"response_id": response.get("id")}},
            )

    def settle(self, ending: Ending) -> None:
        """The request is over: a stream that opened and never reached ``keep`` (the client
        left, the gateway stopped) is kept as far as it got, in the background."""
        if self._kept or self._events is None:
            return
        if ending is Ending.CLIENT_GONE:
            response = self._events.cut("cancelled")
        else:
            error = {"code": "server_error", "message": "The gateway stopped this response."}
            response = self._events.cut("failed", error)
        self._start(response)

    def _start(self, response: Json) -> asyncio.Task[None] | None:
        if not self.stored or self._kept:
            return None
        self._kept = True
        now = self.service.clock()
        record = StoredResponse(
            id=str(response["id"]),
            tenant_id=self.tenant_id,
            key_id=self.key_id,
            created_at=now,
            expires_at=now + self.service.config.ttl_seconds,
            status=str(response.get("status")),
            previous_response_id=self.previous_response_id,
            response=orjson.dumps(response),
            input_items=self._items,
        )
        return self.service.write(record)


def _listed(source: Json) -> list[Any]:
    new = source.get("input")
    return [{"role": "user", "content": new}] if isinstance(new, str) else list(new or [])


def _with_source(request: ParsedRequest, source: Json) -> ParsedRequest:
    return dataclasses.replace(request, source=source)
