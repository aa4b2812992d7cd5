"""The values the proxy's stages hand each other, from admission to the record.

The pipeline (gateway/proxy/pipeline.py) builds them and the recorder (gateway/proxy/record.py)
reads them; both import this module, neither imports the other's types::

    admitted = Admitted(request, route, prompt, reservation)      # parse, find, reserve
    exchange = Exchange.open(arrival, table, admitted, sink, tracing)
    ended = Ended(Ending.COMPLETE, plan)                           # how the exchange went
    recorder.admitted(incoming, exchange, ended, slot)             # settle and record, once
"""

from __future__ import annotations

from dataclasses import dataclass

from gateway.flow.gate import Waited
from gateway.limits.admission import Reservation
from gateway.proxy.relay import Relay
from gateway.proxy.sink import Sink
from gateway.response_store.service import Turn
from gateway.routing.attempts import Attempts
from gateway.routing.router import RoutePlan
from gateway.runtime.table import ModelRoute, RoutingTable
from gateway.telemetry import Tracing
from gateway.telemetry.attempt import UpstreamAttempts
from gateway.tokens.counting import PromptTokens
from gateway.values import value
from gateway.wire.outcome import NOTHING_DELIVERED, NOWHERE, Arrival, Delivered, Ending, RouteFacts
from gateway.wire.request import ParsedRequest
from gateway.wire.usage import NOTHING, Usage


@value
class Admitted:
    """What the stages before the exchange decided, for the stages after it."""

    request: ParsedRequest
    route: ModelRoute
    prompt: PromptTokens
    reservation: Reservation
    turn: Turn | None = None
    """A Responses request's part in the stored responses (what it continues, how it is kept)."""


@dataclass(eq=False, slots=True)
class Exchange:
    """One admitted request's exchange with the upstream: what it arrived with, the routing
    table snapshot it is served on to the end, what admission decided, and the three parts that
    carry it: the relay to the client, the attempts at replicas (which hold them), and the
    attempts' client spans."""

    arrival: Arrival
    table: RoutingTable
    admitted: Admitted
    relay: Relay
    attempts: Attempts
    spans: UpstreamAttempts

    @classmethod
    def open(
        cls,
        arrival: Arrival,
        table: RoutingTable,
        admitted: Admitted,
        sink: Sink,
        tracing: Tracing,
        tenant: str = "",
    ) -> Exchange:
        """``tenant``: whose places the replicas taken hold (flow control's reserve)."""
        request = admitted.request
        attempts = Attempts(streamed=request.stream, tenant=tenant)
        relay = Relay(sink, strip_usage=request.strip_usage, on_first_byte=attempts.first_token)
        return cls(
            arrival, table, admitted, relay, attempts, UpstreamAttempts(tracing, arrival, request)
        )

    @property
    def request(self) -> ParsedRequest:
        return self.admitted.request

    def delivered(self) -> Delivered:
        """What reached the client, as far as it got."""
        return self.relay.delivered() if self.relay.started else NOTHING_DELIVERED


@value
class Ended:
    """How the exchange ended: the ending, the route plan (None: routing refused or never ran),
    and the exception to raise again once the request is recorded (a shutdown's cancellation,
    or a bug)."""

    ending: Ending
    plan: RoutePlan | None
    error: BaseException | None = None
    waited: Waited | None = None
    """Its band and time in the flow-control queue (None: flow control is off)."""


@value
class Settled:
    """What the outcome records of how a request ended, beyond who asked and for what."""

    ending: Ending
    route: RouteFacts = NOWHERE
    delivered: Delivered = NOTHING_DELIVERED
    usage: Usage = NOTHING
    admitted: bool = False
    """A reservation was taken: the request is settled and leaves one ledger row."""
    reached: bool = False
    prompt_tokens: int | None = None
    waited: Waited | None = None
