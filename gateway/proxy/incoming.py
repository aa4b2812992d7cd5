"""What arrived: the one value a request enters the pipeline with, however it came.

The ASGI endpoint builds it from the scope (gateway/proxy/endpoint.py); a batch job builds one
per line of its input file (issue 39); a test builds it by hand (tests/seam/test_pipeline.py).
Nothing after it reads the HTTP request: routing, flow control and the recorder read these
fields::

    incoming = Incoming(Operation.CHAT, arrival_now(None, clock.wall), principal, body)
    outcome = await pipeline.serve(incoming, sink)
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from gateway.asgi import Headers
from gateway.auth.models import Principal
from gateway.values import value
from gateway.wire.outcome import Arrival
from gateway.wire.request import Operation

BodyReader = Callable[[int], Awaitable[bytes]]
"""Reads a body that is still arriving, refusing more than the limit it is given (the ASGI
endpoint's reads ``receive``; see :func:`gateway.wire.request.read_body`)."""


@value
class Incoming:
    """One request as it arrived: what it asks, who asks, and what the gateway reads of it."""

    operation: Operation
    arrival: Arrival
    """Its id, correlation id and arrival times."""
    principal: Principal | None
    """Who asks (None: auth is off)."""
    body: bytes | BodyReader
    """The JSON body: whole (a batch line), or read as it comes (HTTP), both bounded by the
    server's ``max_body_bytes``."""
    headers: Headers = ()
    """Request headers the gateway reads: the pools' ``forward_headers``, the steering ones
    (``x-gateway-variant``, ``x-gateway-pool-hint``) and the priority band's."""
    client: str | None = None
    """The client's address (the last fallback for a sticky variant); None off the network."""
    method: str = "POST"
    path: str = ""
    """For the outcome and the access log (a batch line's ``url``)."""
    batch_id: str | None = None
    """The batch this request is a line of: its outcome says so, and its ledger row is the
    batch runner's to write (gateway/batches/runner.py)."""
