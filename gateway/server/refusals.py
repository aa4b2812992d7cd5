"""Where the edge protocol reports a refusal it made before any request existed, so that the
app counts it and access-logs it like its own.

The protocol is made by uvicorn, the metrics and the access log by the app factory; they meet in
the ASGI lifespan state, which uvicorn hands to every protocol instance (``app_state``) once the
app's lifespan has filled it. The app's lifespan yields ``{REFUSALS_KEY: recorder}``; with no
lifespan (or another app) the key is absent and the protocol only answers::

    recorder = protocol.app_state.get(REFUSALS_KEY)
    if recorder is not None:
        recorder.refused("connections", Overloaded("..."))
"""

from __future__ import annotations

from typing import Protocol

from gateway.errors import GatewayError

REFUSALS_KEY = "gateway.edge_refusals"

REASONS = ("in_flight", "uploads", "client_uploads", "connections")
"""Every value of ``gateway_overload_refusals_total{reason}``: requests served at once, bodies
arriving at once, bodies arriving from one address, open connections."""


class RefusalRecorder(Protocol):
    def refused(self, reason: str, err: GatewayError) -> None:
        """Count the refusal under ``reason`` (one of :data:`REASONS`) and log its line."""
