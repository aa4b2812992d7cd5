"""The request pipeline, stage by stage, with no HTTP in it: a request value in, an answer out.

The entry point is :meth:`Pipeline.serve`: it takes what arrived (an :class:`Incoming`,
gateway/proxy/incoming.py) and where the answer goes (a :class:`Sink`, gateway/proxy/sink.py),
and returns the request's one :class:`Outcome`. The ASGI endpoint (gateway/proxy/endpoint.py)
is one adapter that builds both from ``scope``, ``receive`` and ``send``; a batch job's line
(issue 39) or a retry the gateway schedules itself builds them without any scope::

    pipeline = Pipeline(state)                   # one per app: app.state.pipeline
    outcome = await pipeline.serve(Incoming(Operation.CHAT, arrival, principal, body), sink)

Authentication runs before, in gateway/auth/middleware.py (deny by default), and hands the
principal down in the request value. Then each stage returns a value to the next:

    parse -> request; route lookup -> model route; admit -> reservation;
    route -> plan; forward -> attempt; relay -> what was delivered;
    settle -> usage -> one Outcome, handed to every consumer (gateway/proxy/record.py)

The values handed between stages are in gateway/proxy/stages.py: :class:`Admitted`, then one
:class:`Exchange` per admitted request (its arrival, table snapshot, admission, relay and
attempts: the attempts own every replica taken, and give each back), then :class:`Ended`.

Everything after admission runs inside one ``try/finally``: every admitted request is settled
exactly once and leaves exactly one ledger row, however it ends (an error raised after
admission, the client gone before the first byte, a reload or a shutdown mid-request).
Reading :meth:`Pipeline.serve` is reading the product.
"""

from __future__ import annotations

import asyncio
from typing import Protocol

from gateway.accounting.stage import Accounting
from gateway.auth.models import Principal
from gateway.config import GatewayConfig
from gateway.errors import BodyTooLarge, GatewayError
from gateway.flow.gate import FlowGate, Waited
from gateway.flow.slo import objective_of
from gateway.metrics import GatewayMetrics
from gateway.proxy.disconnect import DisconnectWatch
from gateway.proxy.incoming import Incoming
from gateway.proxy.record import Recorder
from gateway.proxy.relay import Relay
from gateway.proxy.sink import Sink
from gateway.proxy.stages import Admitted, Ended, Exchange
from gateway.response_store.service import StoredResponses, Turn
from gateway.responses_translation.translator import translator_for
from gateway.routing.attempts import Attempt
from gateway.routing.load import LoadSnapshot
from gateway.routing.outcomes import OutcomeFeed
from gateway.routing.pools import Pool, Replica
from gateway.routing.predicted import Objective
from gateway.routing.router import RoutePlan
from gateway.routing.service import Caller
from gateway.runtime.table import ModelRoute, RoutingTable
from gateway.telemetry import Tracing
from gateway.tokens.counting import PromptTokens
from gateway.upstream.client import UpstreamResponse
from gateway.wire.outcome import Arrival, Ending, Outcome, OutcomeSlot
from gateway.wire.request import BodyShape, Operation, ParsedRequest, parse_request


class PipelineState(Protocol):
    """What the pipeline reads of the app's state (the app's ``GatewayState`` is one)."""

    @property
    def config(self) -> GatewayConfig: ...
    @property
    def table(self) -> RoutingTable:
        """The routing table now: read once per request, which keeps its snapshot to the end."""

    @property
    def accounting(self) -> Accounting: ...
    @property
    def responses(self) -> StoredResponses: ...
    @property
    def flow(self) -> FlowGate | None: ...
    @property
    def tracing(self) -> Tracing: ...
    @property
    def metrics(self) -> GatewayMetrics: ...
    @property
    def outcomes(self) -> OutcomeFeed: ...


class Pipeline:
    """Serves any proxied OpenAI operation (chat, completions, embeddings, responses)."""

    def __init__(self, state: PipelineState) -> None:
        self.state = state
        self.recorder = Recorder(state.metrics, state.accounting, state.outcomes, state.tracing)
        server = state.config.server
        self.shape = BodyShape(server.max_json_containers, server.max_list_items)
        self.paths = {op: ("/v1/" + op.upstream, "/v1/" + op.value) for op in Operation}
        """Each operation's upstream path: translated, and native (the pool serves it itself)."""

    async def serve(
        self, incoming: Incoming, sink: Sink, slot: OutcomeSlot | None = None
    ) -> Outcome:
        """Serve one request: its answer written to ``sink``, its one outcome returned.

        A shutdown's cancellation or a bug is raised again once the request is settled and
        recorded; a caller that still wants the outcome then (the ASGI endpoint's access log)
        passes its own ``slot``, which holds it."""
        slot = OutcomeSlot() if slot is None else slot
        with self.state.table.serving() as table:  # this request's snapshot, to the end
            admitted = await self._admit(incoming, sink, table, slot)
            if admitted is not None:
                principal = incoming.principal
                tenant = "" if principal is None else principal.tenant_id
                exchange = Exchange.open(
                    incoming.arrival, table, admitted, sink, self.state.tracing, tenant
                )
                ended = None
                try:
                    ended = await self._exchange(incoming, sink, exchange)
                finally:  # settle and record: exactly once, whatever happened
                    self.recorder.admitted(incoming, exchange, ended, slot)
                if ended.error is not None:
                    raise ended.error
        assert slot.value is not None
        return slot.value

    async def _admit(
        self, incoming: Incoming, sink: Sink, table: RoutingTable, slot: OutcomeSlot
    ) -> Admitted | None:
        """Parse, find the model, reserve; a refusal is answered and recorded here."""
        principal, arrival = incoming.principal, incoming.arrival
        server = self.state.config.server
        request: ParsedRequest | None = None
        route: ModelRoute | None = None
        try:
            body = await _body(incoming, server.max_body_bytes)
            request, turn = await self._parse(
                incoming.operation, body, arrival, principal, server.max_tokens_limit
            )
            route = table.route(request.model, principal)
            # A translated request (Responses) is counted from its translation: what goes upstream.
            prompt = PromptTokens(route.counter, request.operation, request.payload)
            reservation = await self.state.accounting.admit(
                arrival, principal, request, prompt, route.default_max_tokens, route.name
            )
        except GatewayError as err:
            relay = Relay(sink, strip_usage=False)
            await relay.refuse(err, ())
            self.recorder.refused(incoming, request, route, relay.delivered(), slot)
            return None
        return Admitted(request, route, prompt, reservation, turn)

    async def _parse(
        self,
        operation: Operation,
        body: bytes,
        arrival: Arrival,
        principal: Principal | None,
        max_tokens_limit: int,
    ) -> tuple[ParsedRequest, Turn | None]:
        if operation is Operation.RESPONSES:  # the conversation it continues looked up
            return await self.state.responses.parse(
                body,
                arrival.request_id,
                None if principal is None else principal.tenant_id,
                None if principal is None else principal.key_id,
                max_tokens_limit,
                self.shape,
            )
        return parse_request(operation, body, max_tokens_limit, self.shape), None

    async def _exchange(self, incoming: Incoming, sink: Sink, exchange: Exchange) -> Ended:
        """Route, forward (retries and failover inside), relay; cancelled at once if the client
        goes away. Returns how it ended, a client that left included."""
        watch = DisconnectWatch(sink.departed)
        plan: RoutePlan | None = None
        error: BaseException | None = None
        gate = self.state.flow
        waited = gate.start(incoming.principal, incoming.headers) if gate is not None else None
        try:
            with exchange.attempts:  # every replica taken is given back when this block ends
                plan = exchange.table.routing.plan(
                    exchange.admitted.route.router,
                    exchange.request,
                    incoming.headers,
                    _caller(incoming),
                    exchange.admitted.prompt,
                    objective=lambda: _objective(exchange.table.config, incoming),
                )
                load = None
                if gate is not None and waited is not None:  # holds its reservation meanwhile
                    await gate.wait(waited, plan, exchange.request, exchange.admitted.prompt)
                    load = waited.load  # the snapshot it passed on: dispatch's first choice
                ending = await self._serve(incoming, exchange, plan, load)
        except asyncio.CancelledError as cancelled:
            if watch.client_gone():
                ending = Ending.CLIENT_GONE
            else:
                ending, error = Ending.SHUTDOWN, cancelled
        except GatewayError as err:  # before the answer started: mid-stream ones end the stream
            ending = _failed_before_answer(plan, waited)
            headers = [*exchange.admitted.reservation.headers, *exchange.attempts.route.headers()]
            await exchange.relay.refuse(err, headers)
        except Exception as bug:  # recorded like any other end, then raised for the 500
            ending, error = Ending.GATEWAY_ERROR, bug
        finally:
            watch.stop()
        return Ended(ending, plan, error, waited)

    async def _serve(
        self,
        incoming: Incoming,
        exchange: Exchange,
        plan: RoutePlan,
        load: LoadSnapshot | None = None,
    ) -> Ending:
        request, arrival, attempts = exchange.request, exchange.arrival, exchange.attempts
        translated_path, native_path = self.paths[incoming.operation]

        async def send_via(pool: Pool, replica: Replica, model: str | None) -> UpstreamResponse:
            headers = _upstream_headers(incoming, arrival, pool)
            if _native(request, pool):  # the client's own body, to a pool that serves it
                path, body = native_path, request.native_body(model)
            else:
                path, body = translated_path, request.with_model(model)
            with exchange.spans.sending(replica.label) as span:  # one client span per attempt
                headers.extend(span.headers)  # its W3C traceparent
                response = await pool.client.send(replica.url + path, headers, body)
                return span.answered(response)

        dispatcher = exchange.table.routing.dispatcher
        attempt = await dispatcher.first_answer(plan, send_via, attempts, load)
        headers = [*exchange.admitted.reservation.headers, *attempts.route.headers()]
        native = _native(request, attempt.pool)
        translator = translator_for(
            request, arrival.request_id, native=native, keeper=exchange.admitted.turn
        )
        relay = exchange.relay
        try:
            clean = await relay.answer(attempt.response, headers, translator)
        except GatewayError as err:  # the whole answer failed before it was sent
            attempts.settle(err.code or "error", reusable=False)
            raise
        except BaseException:  # cancelled: the client left, or the gateway is stopping
            failure = _upstream_failure(attempt, relay)
            attempts.settle(failure, reusable=False, abandoned=failure is None)
            raise
        attempts.settle(_upstream_failure(attempt, relay), reusable=clean)
        if clean and attempt.response.is_event_stream:  # its answer is in the engine's cache
            meter = relay.meter
            exchange.table.routing.remember_answer(
                exchange.admitted.route.router,
                request,
                plan,
                attempt.pool,
                attempt.replica,
                lambda: "".join(meter.output_parts),
            )
        return Ending.COMPLETE if clean else Ending.UPSTREAM_FAILED


def _native(request: ParsedRequest, pool: Pool) -> bool:
    """The pool serves the request's operation itself (a Responses request, untranslated)."""
    return request.source is not None and pool.config.responses == "native"


def _failed_before_answer(plan: RoutePlan | None, waited: Waited | None) -> Ending:
    """A gateway error before any answer: routing refused it (a bad variant header), flow
    control refused it (shed, the queue full or its wait over), no pool could take it, or the
    upstream failed it (connect error, 5xx, timeout)."""
    if plan is None or (waited is not None and waited.refused):
        return Ending.REFUSED
    return Ending.UPSTREAM_FAILED


def _upstream_failure(attempt: Attempt, relay: Relay) -> str | None:
    """The replica's part in how the answer went: None when it did its job (a 4xx included,
    which is the client's doing)."""
    status = attempt.response.status
    if status >= 500:
        return f"status {status}"
    return relay.error_code  # the stream broke or stalled


async def _body(incoming: Incoming, limit: int) -> bytes:
    """The request body, never more than ``limit`` bytes (a whole one is checked too: a batch
    line is as hostile as an HTTP body)."""
    body = incoming.body
    if isinstance(body, bytes):
        if len(body) > limit:
            raise BodyTooLarge(f"The request body is larger than the limit of {limit} bytes.")
        return body
    return await body(limit)


def _objective(config: GatewayConfig, incoming: Incoming) -> Objective:
    return objective_of(config.slo, config.flow, incoming.principal, incoming.headers)


def _caller(incoming: Incoming) -> Caller:
    principal = incoming.principal
    if principal is None:
        return Caller(None, None, incoming.client)
    return Caller(principal.key_id, dict(principal.labels), incoming.client)


def _upstream_headers(
    incoming: Incoming, arrival: Arrival, pool: Pool
) -> list[tuple[bytes, bytes]]:
    # The upstream sees the gateway's own id (vLLM may use it as its engine request id, so it
    # must be unique), and the client's correlation id alongside.
    headers = [
        (b"content-type", b"application/json"),
        (b"x-request-id", arrival.request_id.encode()),
    ]
    if arrival.correlation_id is not None:
        headers.append((b"x-client-request-id", arrival.correlation_id.encode()))
    forwarded = pool.forward_headers
    if forwarded:
        headers.extend((k, v) for k, v in incoming.headers if k in forwarded)
    return headers
